// Package v2: the HPA status conditions the executor's health check reads.
package v2

import corev1 "k8s.io/api/core/v1"

type HorizontalPodAutoscalerConditionType string

const ScalingActive HorizontalPodAutoscalerConditionType = "ScalingActive"

type HorizontalPodAutoscalerCondition struct {
	Type    HorizontalPodAutoscalerConditionType
	Status  corev1.ConditionStatus
	Reason  string
	Message string
}

type HorizontalPodAutoscalerStatus struct {
	Conditions []HorizontalPodAutoscalerCondition
}

type HorizontalPodAutoscaler struct{ Status HorizontalPodAutoscalerStatus }
