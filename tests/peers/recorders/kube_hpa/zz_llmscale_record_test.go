// Records the HPA's own replica calculator on scripted cases, inside Kubernetes' source tree
// (package podautoscaler, so the unexported calculation runs as the controller runs it).
// Copied into pkg/controller/podautoscaler by tests/peers/recorders/record_kube_hpa.py; never
// part of llmscale itself.
package podautoscaler

import (
	"encoding/json"
	"os"
	"testing"
	"time"

	autoscalingv2 "k8s.io/api/autoscaling/v2beta2"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	metricsclient "k8s.io/kubernetes/pkg/controller/podautoscaler/metrics"
)

type llmscalePod struct {
	Name  string `json:"name"`
	Phase string `json:"phase"`
	// the pod's sample in milli-units; absent: the pod has no sample
	MilliValue *int64 `json:"milli_value,omitempty"`
}

type llmscaleCase struct {
	Kind      string        `json:"kind"` // "pods" or "external-per-pod"
	Current   int32         `json:"current"`
	Target    int64         `json:"target_milli"`
	Tolerance float64       `json:"tolerance"`
	Pods      []llmscalePod `json:"pods,omitempty"`
	External  []int64       `json:"external_milli,omitempty"`
	Replicas  int32         `json:"replicas"`
	Error     string        `json:"error,omitempty"`
}

// scripted answers GetExternalMetric with the case's values; the HPA asks nothing else here.
type scripted struct{ values []int64 }

func (s scripted) GetResourceMetric(v1.ResourceName, string, labels.Selector, string) (metricsclient.PodMetricsInfo, time.Time, error) {
	panic("not asked")
}
func (s scripted) GetRawMetric(string, string, labels.Selector, labels.Selector) (metricsclient.PodMetricsInfo, time.Time, error) {
	panic("not asked")
}
func (s scripted) GetObjectMetric(string, string, *autoscalingv2.CrossVersionObjectReference, labels.Selector) (int64, time.Time, error) {
	panic("not asked")
}
func (s scripted) GetExternalMetric(string, string, labels.Selector) ([]int64, time.Time, error) {
	return s.values, time.Now(), nil
}

func TestLlmscaleRecord(t *testing.T) {
	raw, err := os.ReadFile(os.Getenv("LLMSCALE_HPA_CASES"))
	if err != nil {
		t.Fatal(err)
	}
	var cases []llmscaleCase
	if err := json.Unmarshal(raw, &cases); err != nil {
		t.Fatal(err)
	}
	for i := range cases {
		c := &cases[i]
		indexer := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})
		metrics := metricsclient.PodMetricsInfo{}
		for _, p := range c.Pods {
			pod := &v1.Pod{
				ObjectMeta: metav1.ObjectMeta{Name: p.Name, Namespace: "ns", Labels: map[string]string{"app": "llm"}},
				Status:     v1.PodStatus{Phase: v1.PodPhase(p.Phase)},
			}
			if err := indexer.Add(pod); err != nil {
				t.Fatal(err)
			}
			if p.MilliValue != nil {
				metrics[p.Name] = metricsclient.PodMetric{Value: *p.MilliValue, Timestamp: time.Now(), Window: time.Minute}
			}
		}
		rc := NewReplicaCalculator(scripted{c.External}, corelisters.NewPodLister(indexer), c.Tolerance, 5*time.Minute, 30*time.Second)
		var n int32
		switch c.Kind {
		case "pods":
			n, _, err = rc.calcPlainMetricReplicas(metrics, c.Current, c.Target, "ns", labels.Everything(), v1.ResourceName(""))
		case "external-per-pod":
			n, _, _, err = rc.GetExternalPerPodMetricReplicas(c.Current, c.Target, "m", "ns", &metav1.LabelSelector{})
		default:
			t.Fatalf("unknown kind %q", c.Kind)
		}
		c.Replicas = n
		if err != nil {
			c.Error = err.Error()
		}
	}
	out, _ := json.MarshalIndent(cases, "", " ")
	if err := os.WriteFile(os.Getenv("LLMSCALE_HPA_OUT"), out, 0o644); err != nil {
		t.Fatal(err)
	}
}
