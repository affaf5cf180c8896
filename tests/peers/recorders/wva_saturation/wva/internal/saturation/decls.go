// The declaration analyzer.go takes from the rest of its package, and the recording entry point.
package saturation

import (
	"context"
	"fmt"

	"github.com/llm-d/llm-d-workload-variant-autoscaler/internal/interfaces"
)

// MinNonSaturatedReplicasForScaleDown: WVA's constant (2), declared beside analyzer.go upstream.
const MinNonSaturatedReplicasForScaleDown = 2

// Case is one recorded input: one variant's pods and its replica state.
type Case struct {
	KV      []float64  `json:"kv"`
	Queue   []int      `json:"queue"`
	Config  Thresholds `json:"config"`
	Current int        `json:"current"`
	Desired int        `json:"desired"`
	Pending int        `json:"pending"`
}

// Thresholds: the four fields of SaturationScalingConfig the V1 analyzer reads.
type Thresholds struct {
	KvCacheThreshold     float64 `json:"kv_cache_threshold"`
	QueueLengthThreshold float64 `json:"queue_length_threshold"`
	KvSpareTrigger       float64 `json:"kv_spare_trigger"`
	QueueSpareTrigger    float64 `json:"queue_spare_trigger"`
}

// Result is what the analyzer and CalculateSaturationTargets give for a case.
type Result struct {
	NonSaturated  int     `json:"non_saturated"`
	AvgSpareKV    float64 `json:"avg_spare_kv"`
	AvgSpareQueue float64 `json:"avg_spare_queue"`
	ScaleUp       bool    `json:"scale_up"`
	ScaleDownSafe bool    `json:"scale_down_safe"`
	Target        int     `json:"target"`
}

// Record runs AnalyzeModelSaturation then CalculateSaturationTargets on each case.
func Record(cases []Case) []Result {
	ctx := context.Background()
	a := NewAnalyzer()
	out := make([]Result, len(cases))
	for i, c := range cases {
		metrics := make([]interfaces.ReplicaMetrics, len(c.KV))
		for j := range c.KV {
			metrics[j] = interfaces.ReplicaMetrics{
				PodName: fmt.Sprintf("pod-%d", j), VariantName: "v", AcceleratorName: "H100", Cost: 10,
				KvCacheUsage: c.KV[j], QueueLength: c.Queue[j],
			}
		}
		an, err := a.AnalyzeModelSaturation(ctx, "m", "ns", metrics, interfaces.SaturationScalingConfig(c.Config))
		if err != nil {
			panic(err)
		}
		states := []interfaces.VariantReplicaState{{
			VariantName: "v", CurrentReplicas: c.Current, DesiredReplicas: c.Desired, PendingReplicas: c.Pending,
		}}
		targets := a.CalculateSaturationTargets(ctx, an, states)
		out[i] = Result{an.NonSaturatedCount, an.AvgSpareKvCapacity, an.AvgSpareQueueLength,
			an.ShouldScaleUp, an.ScaleDownSafe, targets["v"]}
	}
	return out
}
