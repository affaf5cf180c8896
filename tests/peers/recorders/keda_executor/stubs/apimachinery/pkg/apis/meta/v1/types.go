// Package v1: object metadata, Time and condition status, reduced to what the executor uses.
package v1

import "time"

type ConditionStatus string

const (
	ConditionTrue    ConditionStatus = "True"
	ConditionFalse   ConditionStatus = "False"
	ConditionUnknown ConditionStatus = "Unknown"
)

type Time struct{ time.Time }

type ObjectMeta struct {
	Name              string
	Namespace         string
	CreationTimestamp Time
}

type GetOptions struct{}

type UpdateOptions struct{}
