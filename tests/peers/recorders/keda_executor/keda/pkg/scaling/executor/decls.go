// The declarations scale_scaledobjects.go takes from scale_executor.go (its defaults 0 s and
// 300 s, the result and executor types) with in-memory clients, and the recording entry point.
package executor

import (
	"context"
	"errors"
	"time"

	"github.com/go-logr/logr"
	autoscalingv1 "k8s.io/api/autoscaling/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	kedav1alpha1 "github.com/kedacore/keda/v2/apis/keda/v1alpha1"
	"github.com/kedacore/keda/v2/pkg/scaling/resolver"
)

const (
	defaultInitialCooldownPeriod = 0
	defaultCooldownPeriod        = 5 * 60
)

type ScaleResult struct {
	Conditions       kedav1alpha1.Conditions
	PauseReplicas    *int32
	Error            error
	LastActiveTime   *metav1.Time
	TriggersActivity map[string]kedav1alpha1.TriggerActivityStatus
}

type ScaleExecutorOptions struct {
	ActiveTriggers      []string
	ForPushScalerMetric string
}

// objectClient answers every read with an error: the HPA health check then leaves its condition.
type objectClient struct{}

func (objectClient) Get(context.Context, types.NamespacedName, interface{}) error {
	return errors.New("no HPA in the recording")
}

// scales is the scale subresource of the one target: Update records the replicas written.
type scales struct {
	replicas int32
	writes   int
}

func (s *scales) Scales(string) *scales { return s }
func (s *scales) Get(context.Context, string, string, metav1.GetOptions) (*autoscalingv1.Scale, error) {
	return &autoscalingv1.Scale{Spec: autoscalingv1.ScaleSpec{Replicas: s.replicas}}, nil
}
func (s *scales) Update(_ context.Context, _ string, sc *autoscalingv1.Scale, _ metav1.UpdateOptions) (*autoscalingv1.Scale, error) {
	s.replicas = sc.Spec.Replicas
	s.writes++
	return sc, nil
}

type recorder struct{}

func (recorder) Eventf(interface{}, interface{}, string, string, string, string, ...interface{}) {}

type scaleExecutor struct {
	client      objectClient
	scaleClient *scales
	logger      logr.Logger
	recorder    recorder
}

func getTriggersActivity(*kedav1alpha1.ScaledObject, ScaleExecutorOptions) map[string]kedav1alpha1.TriggerActivityStatus {
	return nil
}

// Case: the scale target's replicas, the trigger's activity and the ScaledObject's settings;
// IdleS is the time since status.lastActiveTime (nil: never active), CooldownS nil for the default.
type Case struct {
	Current    int32    `json:"current"`
	Active     bool     `json:"active"`
	MinReplica int32    `json:"min_replicas"`
	CooldownS  *int32   `json:"cooldown_period_s"`
	IdleS      *float64 `json:"idle_s"`
}

// Result: the replicas on the target after RequestScale, whether KEDA wrote them, whether it
// stamped lastActiveTime, and the Active condition's reason.
type Result struct {
	Replicas     int32  `json:"replicas"`
	Wrote        bool   `json:"wrote"`
	StampsActive bool   `json:"stamps_last_active"`
	ActiveReason string `json:"active_reason"`
}

// Record runs RequestScale on each case (no error from the scaler, one trigger).
func Record(cases []Case) []Result {
	out := make([]Result, len(cases))
	for i, c := range cases {
		now := time.Now()
		minReplicas := c.MinReplica
		so := &kedav1alpha1.ScaledObject{
			ObjectMeta: metav1.ObjectMeta{Name: "so", Namespace: "ns", CreationTimestamp: metav1.Time{Time: now.Add(-time.Hour)}},
			Spec: kedav1alpha1.ScaledObjectSpec{
				ScaleTargetRef: &kedav1alpha1.ScaleTarget{Name: "vllm"}, MinReplicaCount: &minReplicas,
				CooldownPeriod: c.CooldownS,
			},
			Status: kedav1alpha1.ScaledObjectStatus{ScaleTargetGVKR: &kedav1alpha1.GroupVersionKindResource{Resource: "deployments"}},
		}
		if c.IdleS != nil {
			so.Status.LastActiveTime = &metav1.Time{Time: now.Add(-time.Duration(*c.IdleS * float64(time.Second)))}
		}
		resolver.Current = c.Current
		sc := &scales{replicas: c.Current}
		e := &scaleExecutor{scaleClient: sc}
		var active []string
		if c.Active {
			active = []string{"s0-prometheus"}
		}
		r := e.RequestScale(context.Background(), so, c.Active, false, ScaleExecutorOptions{ActiveTriggers: active})
		reason := ""
		for _, cond := range r.Conditions {
			if cond.Type == "Active" {
				reason = cond.Reason
			}
		}
		out[i] = Result{sc.replicas, sc.writes > 0, r.LastActiveTime != nil, reason}
	}
	return out
}
