// The fields of WVA's interfaces types that analyzer.go reads or writes, with the Go types it
// relies on (QueueLength is an int: the analyzer converts it to float64 for the threshold test).
package interfaces

import "time"

type ReplicaMetrics struct {
	PodName         string
	VariantName     string
	AcceleratorName string
	Cost            float64
	KvCacheUsage    float64
	QueueLength     int
}

type SaturationScalingConfig struct {
	KvCacheThreshold     float64
	QueueLengthThreshold float64
	KvSpareTrigger       float64
	QueueSpareTrigger    float64
}

type VariantSaturationAnalysis struct {
	VariantName         string
	AcceleratorName     string
	Cost                float64
	ReplicaCount        int
	NonSaturatedCount   int
	MaxKvCacheUsage     float64
	MaxQueueLength      int
	AvgSpareKvCapacity  float64
	AvgSpareQueueLength float64
	SaturatedReplicas   []string
}

type ModelSaturationAnalysis struct {
	ModelID             string
	Namespace           string
	AnalyzedAt          time.Time
	TotalReplicas       int
	NonSaturatedCount   int
	AvgSpareKvCapacity  float64
	AvgSpareQueueLength float64
	ShouldScaleUp       bool
	ScaleUpReason       string
	ScaleDownSafe       bool
	VariantAnalyses     []VariantSaturationAnalysis
}

type VariantReplicaState struct {
	VariantName     string
	CurrentReplicas int
	DesiredReplicas int
	PendingReplicas int
}
