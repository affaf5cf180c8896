package autoscaling

// The scaling metric names Scale switches on.
const (
	Concurrency = "concurrency"
	RPS         = "rps"
)
