// Package v1: the core constants the scale executor compares with or passes on.
package v1

type ConditionStatus string

const (
	ConditionTrue    ConditionStatus = "True"
	EventTypeNormal                  = "Normal"
	EventTypeWarning                 = "Warning"
)
