package conversion

import (
	"encoding/json"
	"testing"

	"k8s.io/apimachinery/pkg/util/validation/field"

	corev1alpha1 "github.com/compositor-dev/compositor/api/core/v1alpha1"
)

// FuzzCompileSteps feeds declared steps and values of any shape to the rules: a
// declaration either compiles or is refused with an error, never a panic, and compiled
// steps convert any values there and back without one.
func FuzzCompileSteps(f *testing.F) {
	f.Add(`[{"from":"1.1.6","to":"2.0.0","rules":[{"move":"service.type","to":"exposure","map":{"ClusterIP":"internal","NodePort":"public","LoadBalancer":"public"},"reverse":{"internal":"ClusterIP","public":"LoadBalancer"}}]}]`,
		`{"service":{"type":"NodePort","port":80}}`)
	f.Add(`[{"from":"1.0.0","to":"2.0.0","rules":[{"derive":"url","expression":"'http://' + self.host","inverse":{"host":"self.url.split('/')[2]"}},{"drop":"legacy"}]}]`,
		`{"host":"example.test","legacy":[1,2,{"a":null}]}`)
	f.Add(`[{"from":"1.0.0","to":"2.0.0","rules":[{"move":"a","to":"b.c","map":{"1":2,"true":false},"default":null}]}]`,
		`{"a":1,"b":"not an object"}`)
	f.Add(`[{"from":"1.0.0","to":"2.0.0","rules":[{"derive":"x","expression":"0.0 / 0.0"}]}]`, `{}`)
	f.Add(`[{"from":"1.0.0","to":"2.0.0","rules":[{"derive":"x","expression":"[1,2,3].map(i, [i, i, i, i, i, i, i, i, i, i].map(j, j * i))"}]}]`, `{}`)
	f.Fuzz(func(t *testing.T, stepsJSON, valuesJSON string) {
		var declared []corev1alpha1.ConversionStep
		if json.Unmarshal([]byte(stepsJSON), &declared) != nil {
			return
		}
		steps, err := CompileSteps(declared, field.NewPath("spec", "conversions"))
		if err != nil {
			return
		}
		values, err := Decode([]byte(valuesJSON))
		if err != nil {
			return
		}
		for _, s := range steps {
			_ = s.forward(values)
		}
		for i := len(steps) - 1; i >= 0; i-- {
			_ = steps[i].backward(values)
		}
		if _, err := compactJSON(values); err != nil {
			t.Fatalf("the converted values are not JSON: %v", err)
		}
	})
}
