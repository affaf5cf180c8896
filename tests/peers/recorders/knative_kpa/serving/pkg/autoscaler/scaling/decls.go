// The declarations autoscaler.go takes from the rest of its package (multiscaler.go, metrics.go),
// reduced to what Scale reads: the DeciderSpec fields and result types by Knative's names, the
// 2 s tick, and a metrics recorder that keeps nothing.
package scaling

import (
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.uber.org/zap"
)

const tickInterval = 2 * time.Second

type DeciderSpec struct {
	MaxScaleUpRate      float64
	MaxScaleDownRate    float64
	ScalingMetric       string
	TargetValue         float64
	TotalValue          float64
	TargetBurstCapacity float64
	ActivatorCapacity   float64
	PanicThreshold      float64
	StableWindow        time.Duration
	ScaleDownDelay      time.Duration
	InitialScale        int32
	Reachable           bool
	ActivationScale     int32
}

type ScaleResult struct {
	DesiredPodCount     int32
	ExcessBurstCapacity int32
	ScaleValid          bool
}

var invalidSR = ScaleResult{ScaleValid: false}

type UniScaler interface {
	Scale(*zap.SugaredLogger, time.Time) ScaleResult
	Update(*DeciderSpec)
	OnDelete()
}

type scalingMetrics struct{}

func newMetrics(metric.MeterProvider, string, attribute.Set) *scalingMetrics {
	return &scalingMetrics{}
}
func (*scalingMetrics) SetPanic(bool)                                    {}
func (*scalingMetrics) Record(float64, int64, float64, float64, float64) {}
func (*scalingMetrics) OnDelete()                                        {}
