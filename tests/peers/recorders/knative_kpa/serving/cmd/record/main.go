// Reads scenarios (JSON on stdin), replays each through Knative's Scale, writes the outcomes.
package main

import (
	"encoding/json"
	"os"
	"time"

	"knative.dev/serving/pkg/autoscaler/scaling"
)

type spec struct {
	TargetValue      float64 `json:"target_value"`
	TotalValue       float64 `json:"total_value"`
	PanicThreshold   float64 `json:"panic_threshold"`
	MaxScaleUpRate   float64 `json:"max_scale_up_rate"`
	MaxScaleDownRate float64 `json:"max_scale_down_rate"`
	StableWindowS    float64 `json:"stable_window_s"`
	ScaleDownDelayS  float64 `json:"scale_down_delay_s"`
	Reachable        bool    `json:"reachable"`
}

type scenario struct {
	Name  string            `json:"name"`
	Spec  spec              `json:"spec"`
	Ticks []scaling.Tick    `json:"ticks"`
	Out   []scaling.Outcome `json:"outcomes,omitempty"`
}

func main() {
	var in []scenario
	if err := json.NewDecoder(os.Stdin).Decode(&in); err != nil {
		panic(err)
	}
	for i := range in {
		s := in[i].Spec
		in[i].Out = scaling.Replay(scaling.DeciderSpec{
			MaxScaleUpRate:   s.MaxScaleUpRate,
			MaxScaleDownRate: s.MaxScaleDownRate,
			ScalingMetric:    "concurrency",
			TargetValue:      s.TargetValue,
			TotalValue:       s.TotalValue,
			PanicThreshold:   s.PanicThreshold,
			StableWindow:     time.Duration(s.StableWindowS * float64(time.Second)),
			ScaleDownDelay:   time.Duration(s.ScaleDownDelayS * float64(time.Second)),
			Reachable:        s.Reachable,
		}, in[i].Ticks)
	}
	enc := json.NewEncoder(os.Stdout)
	enc.SetIndent("", " ")
	if err := enc.Encode(in); err != nil {
		panic(err)
	}
}
