// The ScaledObject fields and methods scale_scaledobjects.go uses, reduced: no pause or
// force-activation annotations (those methods answer false), conditions kept as reason strings.
package v1alpha1

import metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

const (
	ScaledObjectConditionReadySuccessReason          = "ScaledObjectReady"
	ScaledObjectConditionReadySuccessMessage         = "ScaledObject is defined correctly and is ready for scaling"
	ScaledObjectConditionHPAMetricsUnavailableReason = "HPAMetricsUnavailable"
	ScaledObjectConditionHPAActiveReason             = "HPAActive"
	ScaledObjectConditionHPAScalingDisabledReason    = "ScalingDisabled"
)

type Condition struct {
	Type   string
	Status metav1.ConditionStatus
	Reason string
}

type Conditions []Condition

func (c *Conditions) set(t string, s metav1.ConditionStatus, reason string) {
	for i := range *c {
		if (*c)[i].Type == t {
			(*c)[i] = Condition{t, s, reason}
			return
		}
	}
	*c = append(*c, Condition{t, s, reason})
}

func (c *Conditions) SetReadyCondition(s metav1.ConditionStatus, reason, _ string) {
	c.set("Ready", s, reason)
}
func (c *Conditions) SetActiveCondition(s metav1.ConditionStatus, reason, _ string) {
	c.set("Active", s, reason)
}
func (c *Conditions) SetPausedCondition(s metav1.ConditionStatus, reason, _ string) {
	c.set("Paused", s, reason)
}
func (c *Conditions) SetHPAActiveCondition(s metav1.ConditionStatus, reason, _ string) {
	c.set("HPAActive", s, reason)
}

type TriggerActivityStatus struct{ IsActive bool }

type ScaleTarget struct{ Name string }

type Fallback struct{ Replicas int32 }

type ScaledObjectSpec struct {
	ScaleTargetRef        *ScaleTarget
	MinReplicaCount       *int32
	IdleReplicaCount      *int32
	CooldownPeriod        *int32
	InitialCooldownPeriod *int32
	Fallback              *Fallback
}

type GroupVersionKindResource struct{ Resource string }

func (g GroupVersionKindResource) GroupResource() string { return g.Resource }

type ScaledObjectStatus struct {
	LastActiveTime  *metav1.Time
	HpaName         string
	ScaleTargetKind string
	ScaleTargetGVKR *GroupVersionKindResource
}

type ScaledObject struct {
	metav1.ObjectMeta
	Spec   ScaledObjectSpec
	Status ScaledObjectStatus
}

func (so *ScaledObject) NeedToBePausedByAnnotation() bool { return false }
func (so *ScaledObject) NeedToPauseScaleIn() bool         { return false }
func (so *ScaledObject) NeedToForceActivation() bool      { return false }
func (so *ScaledObject) NeedToPauseScaleOut() bool        { return false }
