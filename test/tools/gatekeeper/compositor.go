package main

import (
	"context"
	"fmt"

	chart "helm.sh/helm/v4/pkg/chart/v2"
	"helm.sh/helm/v4/pkg/chart/v2/loader"
	authenticationv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/compositor-dev/compositor/api/policy/v1alpha1"
	"github.com/compositor-dev/compositor/policies"
)

// chartDigest stands for the chart archive's digest, which the schema validator keys
// its compiled schemas by; any fixed string does.
const chartDigest = "sha256:gatekeeper-peer-run"

// compositorSide is Compositor's validating webhook minus HTTP: the judge it calls
// for every request and the chart the compositions are written for.
type compositorSide struct {
	judge *policies.Judge
	chart *chart.Chart
}

// newCompositorSide sets up the engine as production does (default options, so the
// built-in policies are enforced too) with ps as the policy directory's policies, and
// the judge that adds the chart's schema check in front of them.
func newCompositorSide(ctx context.Context, ps []policies.Policy, chartDir string) (*compositorSide, error) {
	e, err := policies.NewEngine(ctx, policies.Options{})
	if err != nil {
		return nil, err
	}
	if err := e.Sync(ctx, policies.OriginDir, ps); err != nil {
		return nil, err
	}
	ch, err := loader.LoadDir(chartDir)
	if err != nil {
		return nil, fmt.Errorf("loading chart: %w", err)
	}
	return &compositorSide{
		judge: policies.NewJudge(policies.JudgeOptions{Engine: e}),
		chart: ch,
	}, nil
}

// request is the admission request for creating obj, as the webhook builds it.
func (c *compositorSide) request(obj map[string]any) *policies.Request {
	return &policies.Request{
		Operation:       "CREATE",
		Kind:            metav1.GroupVersionKind{Group: compositionGroup, Version: compositionVersion, Kind: compositionKind},
		Resource:        metav1.GroupVersionResource{Group: compositionGroup, Version: compositionVersion, Resource: compositionPlural},
		Namespace:       namespace,
		Name:            objectName,
		UserInfo:        authenticationv1.UserInfo{Username: username, Groups: userGroups},
		Object:          obj,
		NamespaceLabels: namespaceLabels,
		Chart:           c.chart,
		ChartDigest:     chartDigest,
		ReleaseName:     objectName,
	}
}

// check is one review: the chart's schema, then every matching policy.
func (c *compositorSide) check(ctx context.Context, r *policies.Request) (policies.Decision, error) {
	return c.judge.Decide(ctx, r)
}

// verdict reads a decision as the verdict check compares it. A schema violation is
// an error: the objects are chosen to pass the schema, so that only policies speak.
func (c *compositorSide) verdict(ctx context.Context, obj map[string]any) (verdict, error) {
	d, err := c.check(ctx, c.request(obj))
	if err != nil {
		return verdict{}, err
	}
	var v verdict
	for _, vi := range d.Violations {
		if vi.IsSchema() {
			return verdict{}, fmt.Errorf("the chart's schema refuses the object: %s", vi)
		}
		f := finding{Policy: vi.Policy, Message: vi.Message}
		switch vi.Action {
		case v1alpha1.EnforcementDeny:
			v.Deny = append(v.Deny, f)
		case v1alpha1.EnforcementWarn:
			v.Warn = append(v.Warn, f)
		}
	}
	v.Denied = d.Denied()
	return v.sorted(), nil
}
