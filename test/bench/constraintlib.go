package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	chart "helm.sh/helm/v4/pkg/chart/v2"
	admissionv1 "k8s.io/api/admission/v1"
	utiljson "k8s.io/apimachinery/pkg/util/json"

	"github.com/compositor-dev/compositor/policies"
	"github.com/compositor-dev/compositor/policies/gatekeeper"
	"github.com/compositor-dev/compositor/test/samplecharts"
)

// constraintLibrary is a directory of Gatekeeper ConstraintTemplates and Constraints
// (test/bench/constraints: one file per template, holding the template and its
// constraint), as objects to apply with the API and compiled as the engine compiles
// them.
type constraintLibrary struct {
	Templates   []map[string]any
	Constraints []map[string]any
	// Library is the templates and constraints compiled, for the engine in-process.
	Library *gatekeeper.Library
}

// loadConstraintLibrary reads every *.yaml file of dir. Each template must compile and
// each constraint must name a template's kind and pass its parameters' schema: a
// library that Compositor would refuse in part is no library to measure.
func loadConstraintLibrary(ctx context.Context, dir string) (*constraintLibrary, error) {
	files, err := filepath.Glob(filepath.Join(dir, "*.yaml"))
	if err != nil {
		return nil, err
	}
	slices.Sort(files)
	lib := &constraintLibrary{}
	var templates []*gatekeeper.Template
	byKind := map[string]*gatekeeper.Template{}
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			return nil, err
		}
		objs, err := gatekeeper.DecodeObjects(data)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", f, err)
		}
		for _, obj := range objs {
			apiVersion, _ := obj["apiVersion"].(string)
			group, _, _ := strings.Cut(apiVersion, "/")
			switch {
			case group == gatekeeper.TemplatesGroup && obj["kind"] == "ConstraintTemplate":
				src, err := gatekeeper.TemplateFromObject(obj)
				if err != nil {
					return nil, fmt.Errorf("%s: %w", f, err)
				}
				t, err := policies.CompileTemplate(ctx, src)
				if err != nil {
					return nil, fmt.Errorf("%s: template %s: %w", f, src.Metadata.Name, err)
				}
				if byKind[t.Kind] != nil {
					return nil, fmt.Errorf("%s: kind %s is defined twice", f, t.Kind)
				}
				byKind[t.Kind] = t
				templates = append(templates, t)
				lib.Templates = append(lib.Templates, obj)
			case group == gatekeeper.ConstraintsGroup:
				lib.Constraints = append(lib.Constraints, obj)
			default:
				return nil, fmt.Errorf("%s: %s %v is neither a ConstraintTemplate nor a Constraint", f, apiVersion, obj["kind"])
			}
		}
	}
	var constraints []*gatekeeper.Constraint
	for _, obj := range lib.Constraints {
		c, err := gatekeeper.ParseConstraint(obj)
		if err != nil {
			return nil, err
		}
		t := byKind[c.Kind]
		if t == nil {
			return nil, fmt.Errorf("constraint %s: no template defines kind %s", c.Name, c.Kind)
		}
		if err := t.CheckParameters(obj); err != nil {
			return nil, err
		}
		constraints = append(constraints, c)
	}
	lib.Library = gatekeeper.NewLibrary(templates, constraints)
	if n := len(lib.Library.Constraints()); n != len(lib.Constraints) {
		return nil, fmt.Errorf("%d of the %d constraints of %s are enforced", n, len(lib.Constraints), dir)
	}
	return lib, nil
}

// constraintIDs are the constraints of the library as violations name them
// ("constraint Kind/name" is their source, Kind/name their policy).
func (l *constraintLibrary) constraintIDs() []string {
	var out []string
	for _, c := range l.Library.Constraints() {
		out = append(out, c.Kind+"/"+c.Name)
	}
	return out
}

// localEngine is the webhook's decision in-process, set up as the bench's `compositor
// dev` is: the built-ins, the policy directory's policies as CompositionPolicies, the
// library's constraints, and fireworks-app 1.1.5 for the composition reviews.
type localEngine struct {
	judge *policies.Judge
	chart *chart.Chart
}

// localChartDigest stands for the chart archive's digest, by which schemas are cached.
const localChartDigest = "sha256:bench-local"

func newLocalEngine(ctx context.Context, policyDir string, lib *constraintLibrary) (*localEngine, error) {
	e, err := policies.NewEngine(ctx, policies.Options{})
	if err != nil {
		return nil, err
	}
	dir, err := policies.LoadDir(policyDir)
	if err != nil {
		return nil, err
	}
	if err := dir.Err(); err != nil {
		return nil, err
	}
	if err := e.Sync(ctx, policies.OriginObject, dir.Policies); err != nil {
		return nil, err
	}
	e.SetConstraints(policies.OriginObject, lib.Library)
	ch, err := samplecharts.Load("1.1.5")
	if err != nil {
		return nil, err
	}
	return &localEngine{judge: policies.NewJudge(policies.JudgeOptions{Engine: e}), chart: ch}, nil
}

// check decides the AdmissionReview body of a composition as the webhook would, with
// the bench namespace's labels.
func (l *localEngine) check(ctx context.Context, body []byte) (policies.Decision, error) {
	var review admissionv1.AdmissionReview
	if err := json.Unmarshal(body, &review); err != nil || review.Request == nil {
		return policies.Decision{}, fmt.Errorf("not an AdmissionReview: %v", err)
	}
	req := review.Request
	var obj, old map[string]any
	if err := utiljson.Unmarshal(req.Object.Raw, &obj); err != nil {
		return policies.Decision{}, err
	}
	if len(req.OldObject.Raw) > 0 {
		if err := utiljson.Unmarshal(req.OldObject.Raw, &old); err != nil {
			return policies.Decision{}, err
		}
	}
	r := policies.NewRequest(policies.Write{Operation: string(req.Operation), Object: obj, OldObject: old, Resource: req.Resource, Namespace: req.Namespace,
		UserInfo: req.UserInfo, NamespaceLabels: map[string]string{"team": "a", "kubernetes.io/metadata.name": req.Namespace},
		Chart: l.chart, ChartDigest: localChartDigest})
	return l.judge.Decide(ctx, r)
}
