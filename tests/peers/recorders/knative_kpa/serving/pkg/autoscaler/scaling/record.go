// Runs Knative's own Scale over scripted ticks: each tick sets the ready pods and the stable and
// panic averages the metric client answers, then records what Scale decided and its panic state.
package scaling

import (
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.uber.org/zap"
	"k8s.io/apimachinery/pkg/types"
	"knative.dev/serving/pkg/autoscaler/aggregation/max"
	am "knative.dev/serving/pkg/autoscaler/metrics"
)

type Tick struct {
	TimeS  float64 `json:"time_s"`
	Ready  int     `json:"ready"`
	Stable float64 `json:"stable"`
	Panic  float64 `json:"panic"`
	NoData bool    `json:"no_data,omitempty"`
}

type Outcome struct {
	Desired      int32 `json:"desired"`
	Valid        bool  `json:"valid"`
	Panicking    bool  `json:"panicking"`
	MaxPanicPods int32 `json:"max_panic_pods"`
}

type scripted struct {
	tick *Tick
}

func (s *scripted) ReadyCount() (int, error)    { return s.tick.Ready, nil }
func (s *scripted) NotReadyCount() (int, error) { return 0, nil }

func (s *scripted) StableAndPanicConcurrency(types.NamespacedName, time.Time) (float64, float64, error) {
	if s.tick.NoData {
		return 0, 0, am.ErrNoData
	}
	return s.tick.Stable, s.tick.Panic, nil
}

func (s *scripted) StableAndPanicRPS(k types.NamespacedName, now time.Time) (float64, float64, error) {
	return s.StableAndPanicConcurrency(k, now)
}

// Replay builds an autoscaler as New does (its first tick's ready pods decide whether it starts
// in panic) and scales once per tick; times are seconds after a fixed epoch.
func Replay(spec DeciderSpec, ticks []Tick) []Outcome {
	epoch := time.Unix(1_700_000_000, 0)
	src := &scripted{tick: &ticks[0]}
	var delayer *max.TimeWindow
	if spec.ScaleDownDelay > 0 {
		delayer = max.NewTimeWindow(spec.ScaleDownDelay, tickInterval)
	}
	a := newAutoscaler(attribute.Set{}, nil, "ns", "rev", src, src, &spec, delayer)
	// newAutoscaler stamps panicTime with the wall clock; on scripted time it is the first tick's.
	if !a.panicTime.IsZero() {
		a.panicTime = epoch.Add(time.Duration(ticks[0].TimeS * float64(time.Second)))
	}
	out := make([]Outcome, 0, len(ticks))
	for i := range ticks {
		src.tick = &ticks[i]
		now := epoch.Add(time.Duration(ticks[i].TimeS * float64(time.Second)))
		r := a.Scale(zap.NewNop(), now)
		out = append(out, Outcome{r.DesiredPodCount, r.ScaleValid, !a.panicTime.IsZero(), a.maxPanicPods})
	}
	return out
}
