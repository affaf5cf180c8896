// Package context: the part of AIBrix's ScalingContext that APA's computeTargetReplicas reads,
// answered from one recorded case.
package context

type ScalingContext interface {
	GetTargetValueForMetric(metricName string) (float64, bool)
	GetUpFluctuationTolerance() float64
	GetDownFluctuationTolerance() float64
	GetMaxScaleUpRate() float64
	GetMaxScaleDownRate() float64
	GetCurrentUsePerPod() float64
	SetCurrentUsePerPod(float64)
}

type Case struct {
	Current       int32   `json:"current"`
	Value         float64 `json:"value"`
	Target        float64 `json:"target"`
	UpTolerance   float64 `json:"up_tolerance"`
	DownTolerance float64 `json:"down_tolerance"`
	MaxUpRate     float64 `json:"max_scale_up_rate"`
	MaxDownRate   float64 `json:"max_scale_down_rate"`
}

func (c *Case) GetTargetValueForMetric(string) (float64, bool) { return c.Target, true }
func (c *Case) GetUpFluctuationTolerance() float64             { return c.UpTolerance }
func (c *Case) GetDownFluctuationTolerance() float64           { return c.DownTolerance }
func (c *Case) GetMaxScaleUpRate() float64                     { return c.MaxUpRate }
func (c *Case) GetMaxScaleDownRate() float64                   { return c.MaxDownRate }
func (c *Case) GetCurrentUsePerPod() float64                   { return c.Value }
func (c *Case) SetCurrentUsePerPod(v float64)                  { c.Value = v }
