// Package eventreason: the event reasons the executor emits.
package eventreason

const (
	KEDAScaleTargetActivated          = "KEDAScaleTargetActivated"
	KEDAScaleTargetDeactivated        = "KEDAScaleTargetDeactivated"
	KEDAScaleTargetActivationFailed   = "KEDAScaleTargetActivationFailed"
	KEDAScaleTargetDeactivationFailed = "KEDAScaleTargetDeactivationFailed"
)
