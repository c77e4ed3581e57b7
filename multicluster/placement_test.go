package multicluster

import (
	"strings"
	"testing"

	"github.com/compositor-dev/compositor/api/vocab"
	"github.com/stretchr/testify/assert"
	"k8s.io/apimachinery/pkg/labels"
)

func TestParsePlacement(t *testing.T) {
	prodEU := labels.Set{"env": "prod", "region": "eu"}
	prodUS := labels.Set{"env": "prod", "region": "us"}
	dev := labels.Set{"env": "dev", "region": "eu"}
	for _, tc := range []struct {
		name        string
		annotations map[string]string
		local       bool
		matches     []labels.Set
		misses      []labels.Set
	}{
		{name: "no annotations", annotations: nil, local: true},
		{name: "other annotations", annotations: map[string]string{"krateo.io/paused": "true"}, local: true},
		{name: "equality", annotations: map[string]string{vocab.AnnotationPlacement: "env=prod"}, matches: []labels.Set{prodEU, prodUS}, misses: []labels.Set{dev}},
		{name: "set and equality", annotations: map[string]string{vocab.AnnotationPlacement: "env in (prod),region=eu"}, matches: []labels.Set{prodEU}, misses: []labels.Set{prodUS, dev}},
		{name: "exists", annotations: map[string]string{vocab.AnnotationPlacement: "region"}, matches: []labels.Set{prodEU, prodUS, dev}, misses: []labels.Set{{"env": "prod"}}},
		{name: "not", annotations: map[string]string{vocab.AnnotationPlacement: "env!=dev"}, matches: []labels.Set{prodEU}, misses: []labels.Set{dev}},
		{name: "spaces", annotations: map[string]string{vocab.AnnotationPlacement: "  env = prod , region notin (us) "}, matches: []labels.Set{prodEU}, misses: []labels.Set{prodUS, dev}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, err := ParsePlacement(tc.annotations)
			if err != nil {
				t.Fatalf("ParsePlacement: %v", err)
			}
			if p.Local() != tc.local {
				t.Fatalf("Local() = %v, want %v (%s)", p.Local(), tc.local, p)
			}
			if tc.local {
				if p.String() != "local" {
					t.Errorf("String() = %q, want local", p.String())
				}
				return
			}
			for _, set := range tc.matches {
				if !p.Selector.Matches(set) {
					t.Errorf("%s does not match %v", p, set)
				}
			}
			for _, set := range tc.misses {
				if p.Selector.Matches(set) {
					t.Errorf("%s matches %v", p, set)
				}
			}
		})
	}
}

func TestParsePlacementRefuses(t *testing.T) {
	for _, tc := range []struct {
		value, reason string
	}{
		{"", "is empty"},
		{"   ", "is empty"},
		{"env in prod", "not a valid label selector"},
		{"env=prod,", "not a valid label selector"},
		{"=prod", "not a valid label selector"},
		{"-bad-key=x", "not a valid label selector"},
		{"env=" + strings.Repeat("v", 64), "not a valid label selector"},
		{"env=pr od", "not a valid label selector"},
		{"env in (a,b", "not a valid label selector"},
		{"(env=prod)", "not a valid label selector"},
	} {
		t.Run(tc.value, func(t *testing.T) {
			p, err := ParsePlacement(map[string]string{vocab.AnnotationPlacement: tc.value})
			if err == nil {
				t.Fatalf("ParsePlacement(%q) = %s, want an error", tc.value, p)
			}
			if !strings.Contains(err.Error(), vocab.AnnotationPlacement) || !strings.Contains(err.Error(), tc.reason) {
				t.Errorf("error %q does not name %s and %q", err, vocab.AnnotationPlacement, tc.reason)
			}
			if !p.Local() {
				t.Errorf("a refused placement is %s, want the zero Placement", p)
			}
		})
	}
}

func FuzzParsePlacement(f *testing.F) {
	for _, seed := range []string{"", "env=prod", "env in (prod),region=eu", "!env", "env notin (a,b)", "a=b,c!=d,e", "x in (", "=", ",", "env=prod,"} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, value string) {
		p, err := ParsePlacement(map[string]string{vocab.AnnotationPlacement: value})
		if err != nil {
			if !strings.Contains(err.Error(), vocab.AnnotationPlacement) {
				t.Fatalf("error %q does not name the annotation", err)
			}
			return
		}
		if p.Local() {
			t.Fatalf("ParsePlacement(%q) accepted the annotation as local", value)
		}
		// The canonical form parses to the same selector.
		again, err := ParsePlacement(map[string]string{vocab.AnnotationPlacement: p.String()})
		if err != nil {
			t.Fatalf("the canonical form %q of %q does not parse: %v", p, value, err)
		}
		if again.String() != p.String() {
			t.Fatalf("%q → %q → %q", value, p, again)
		}
		_ = p.Selector.Matches(labels.Set{"env": "prod"})
	})
}

func TestOpenTo(t *testing.T) {
	shop := map[string]string{"kubernetes.io/metadata.name": "shop", "tier": "gold"}
	for _, tc := range []struct {
		annotations map[string]string
		open        bool
		err         string
	}{
		{annotations: nil, open: false},
		{annotations: map[string]string{"other": "x"}, open: false},
		{annotations: map[string]string{vocab.AnnotationNamespaceSelector: "kubernetes.io/metadata.name=shop"}, open: true},
		{annotations: map[string]string{vocab.AnnotationNamespaceSelector: "kubernetes.io/metadata.name"}, open: true},
		{annotations: map[string]string{vocab.AnnotationNamespaceSelector: "tier in (gold,silver),kubernetes.io/metadata.name!=kube-system"}, open: true},
		{annotations: map[string]string{vocab.AnnotationNamespaceSelector: "kubernetes.io/metadata.name=other"}, open: false},
		{annotations: map[string]string{vocab.AnnotationNamespaceSelector: ""}, open: false, err: "compositor.dev/namespace-selector: is empty"},
		{annotations: map[string]string{vocab.AnnotationNamespaceSelector: "tier in (gold"}, open: false, err: "compositor.dev/namespace-selector: \"tier in (gold\" is not a valid label selector"},
	} {
		open, err := OpenTo(tc.annotations, shop)
		assert.Equal(t, tc.open, open, "%v", tc.annotations)
		if tc.err == "" {
			assert.NoError(t, err)
		} else {
			assert.ErrorContains(t, err, tc.err)
		}
	}
}
