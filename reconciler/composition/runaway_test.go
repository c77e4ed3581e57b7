package composition

import (
	"fmt"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

func TestARenderStoppedAtTheDeadlineIsTriedSoonThenLessOften(t *testing.T) {
	obj := &unstructured.Unstructured{}
	obj.SetNamespace("team-a")
	obj.SetName("web")
	obj.SetUID("uid-1")
	obj.SetGeneration(1)
	stop := &GateError{Reason: ReasonRenderRefused, Message: "stopped"}
	var r runaways
	if _, _, ok := r.standing(obj); ok {
		t.Fatal("a composition never stopped has a standing refusal")
	}
	var waits []time.Duration
	for i := range 9 {
		waits = append(waits, r.retryAfter(obj, &GateError{Reason: ReasonRenderRefused, Message: fmt.Sprintf("stop %d", i)}))
	}
	if refusal, wait, ok := r.standing(obj); !ok || refusal.Message != "stop 8" || wait != retryRunaway {
		t.Errorf("standing refusal after 9 stops = %v, %s, %v; want the last stop's, waiting %s", refusal, wait, ok, retryRunaway)
	}
	want := []time.Duration{5 * time.Second, 10 * time.Second, 20 * time.Second, 40 * time.Second, 80 * time.Second, 160 * time.Second, retryRunaway, retryRunaway, retryRunaway}
	for i := range want {
		if waits[i] != want[i] {
			t.Fatalf("waits after each stop = %v, want %v", waits, want)
		}
	}

	obj.SetGeneration(2)
	if _, _, ok := r.standing(obj); ok {
		t.Error("a new spec has the old spec's refusal standing")
	}
	if got := r.retryAfter(obj, stop); got != firstRunawayRetry {
		t.Errorf("a new spec's first stop waits %s, want %s", got, firstRunawayRetry)
	}
	obj.SetUID("uid-2")
	if got := r.retryAfter(obj, stop); got != firstRunawayRetry {
		t.Errorf("a composition made again under the same name waits %s at its first stop, want %s", got, firstRunawayRetry)
	}
	r.retryAfter(obj, stop)
	r.forget(client.ObjectKeyFromObject(obj))
	if got := r.retryAfter(obj, stop); got != firstRunawayRetry {
		t.Errorf("after an install, the next stop waits %s, want %s", got, firstRunawayRetry)
	}
	r.forget(types.NamespacedName{Namespace: "team-a", Name: "web"})
	if len(r.stopped) != 0 {
		t.Errorf("forgotten compositions are still counted: %v", r.stopped)
	}
}
