// The declarations apa.go takes from the rest of its package (algorithm.go), reduced to what it
// compiles against; only computeTargetReplicas is recorded.
package algorithm

import (
	"context"
	"time"

	scalingctx "github.com/vllm-project/aibrix/pkg/controller/podautoscaler/context"
)

type ScalingAlgorithm interface {
	ComputeRecommendation(ctx context.Context, request ScalingRequest) (*ScalingRecommendation, error)
	GetAlgorithmType() string
}

type metricKey struct{ MetricName string }

type aggregated struct {
	StableValue float64
	Confidence  float64
	Trend       float64
	MetricKey   metricKey
}

type ScalingRequest struct {
	CurrentReplicas   int32
	AggregatedMetrics *aggregated
	ScalingContext    scalingctx.ScalingContext
	Timestamp         time.Time
}

type ScalingRecommendation struct {
	DesiredReplicas int32
	Confidence      float64
	Reason          string
	Algorithm       string
	ScaleValid      bool
	Metadata        map[string]interface{}
}

// applyConstraints is not recorded: bounds are the guards' in llmscale; here it passes through.
func applyConstraints(replicas int32, _ scalingctx.ScalingContext) int32 { return replicas }

// Record runs APA's computeTargetReplicas on each case.
func Record(cases []scalingctx.Case) []int32 {
	out := make([]int32, len(cases))
	for i := range cases {
		c := cases[i]
		out[i] = (&APAAlgorithm{}).computeTargetReplicas(float64(c.Current), &c, "metric")
	}
	return out
}
