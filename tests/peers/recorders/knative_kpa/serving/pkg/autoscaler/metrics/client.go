package metrics

import (
	"errors"
	"time"

	"k8s.io/apimachinery/pkg/types"
)

var ErrNoData = errors.New("no data available")

// MetricClient answers the stable and panic window averages (Knative's collector computes them).
type MetricClient interface {
	StableAndPanicConcurrency(key types.NamespacedName, now time.Time) (float64, float64, error)
	StableAndPanicRPS(key types.NamespacedName, now time.Time) (float64, float64, error)
}
