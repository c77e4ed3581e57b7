package crd

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"k8s.io/apiextensions-apiserver/pkg/apis/apiextensions"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	structuralschema "k8s.io/apiextensions-apiserver/pkg/apiserver/schema"
	structuraldefaulting "k8s.io/apiextensions-apiserver/pkg/apiserver/schema/defaulting"
	"k8s.io/apiextensions-apiserver/pkg/apiserver/schema/listtype"
	structuralpruning "k8s.io/apiextensions-apiserver/pkg/apiserver/schema/pruning"
	apiservervalidation "k8s.io/apiextensions-apiserver/pkg/apiserver/validation"
	"k8s.io/apimachinery/pkg/runtime"
	utiljson "k8s.io/apimachinery/pkg/util/json"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// admitter runs what the API server runs on a custom resource write, with its own
// code: pruning of unknown fields and of non-nullable nulls, schema validation, and
// list-set/map checks. It reports pruning as an error too: a pruned value is a value
// silently lost, and the CRD must never lose what Helm would accept.
type admitter struct {
	apiVersion, kind string
	structural       *structuralschema.Structural
	validator        apiservervalidation.SchemaValidator
}

func newAdmitter(t testing.TB, crd *apiextensionsv1.CustomResourceDefinition, version string) *admitter {
	t.Helper()
	for _, v := range crd.Spec.Versions {
		if v.Name != version {
			continue
		}
		var internal apiextensions.JSONSchemaProps
		if err := apiextensionsv1.Convert_v1_JSONSchemaProps_To_apiextensions_JSONSchemaProps(v.Schema.OpenAPIV3Schema, &internal, nil); err != nil {
			t.Fatal(err)
		}
		ss, err := structuralschema.NewStructural(&internal)
		if err != nil {
			t.Fatal(err)
		}
		validator, _, err := apiservervalidation.NewSchemaValidator(&internal)
		if err != nil {
			t.Fatal(err)
		}
		return &admitter{apiVersion: crd.Spec.Group + "/" + version, kind: crd.Spec.Names.Kind, structural: ss, validator: validator}
	}
	t.Fatalf("no version %s", version)
	return nil
}

// admit returns nil if the API server would store spec unchanged.
func (a *admitter) admit(spec any) error {
	obj, err := a.prune(spec)
	if err != nil {
		return err
	}
	errs := apiservervalidation.ValidateCustomResource(nil, obj, a.validator)
	errs = append(errs, listtype.ValidateListSetsAndMaps(field.NewPath(""), a.structural, obj)...)
	return errs.ToAggregate()
}

// repoRoot is the directory of go.mod above the package directory.
func repoRoot(t testing.TB) string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatal("no go.mod above the test directory")
		}
		dir = parent
	}
}

func inCI() bool {
	v := strings.ToLower(os.Getenv("CI"))
	return v != "" && v != "false" && v != "0"
}

// silentLoss returns an error when the API server would store a composition with spec
// after pruning something from it: a key the webhook then never sees. A value pruning
// touches but validation refuses anyway is no loss: the write fails.
func (a *admitter) silentLoss(spec any) error {
	raw, err := json.Marshal(map[string]any{
		"apiVersion": a.apiVersion, "kind": a.kind,
		"metadata": map[string]any{"name": "x", "namespace": "default"},
		"spec":     spec,
	})
	if err != nil {
		return err
	}
	var obj map[string]any
	if err := utiljson.Unmarshal(raw, &obj); err != nil {
		return err
	}
	before := runtime.DeepCopyJSON(obj)
	structuralpruning.PruneWithOptions(obj, a.structural, true, structuralschema.UnknownFieldPathOptions{})
	structuraldefaulting.PruneNonNullableNullsWithoutDefaults(obj, a.structural)
	if reflect.DeepEqual(before, obj) {
		return nil
	}
	errs := apiservervalidation.ValidateCustomResource(nil, obj, a.validator)
	errs = append(errs, listtype.ValidateListSetsAndMaps(field.NewPath(""), a.structural, obj)...)
	if len(errs) > 0 {
		return nil
	}
	return fmt.Errorf("stored as %v, not as written: %v", obj["spec"], before["spec"])
}

// prune runs the API server's pruning on a composition with spec and returns the
// object, or an error naming what pruning removed.
func (a *admitter) prune(spec any) (map[string]any, error) {
	raw, err := json.Marshal(map[string]any{
		"apiVersion": a.apiVersion, "kind": a.kind,
		"metadata": map[string]any{"name": "x", "namespace": "default"},
		"spec":     spec,
	})
	if err != nil {
		return nil, err
	}
	var obj map[string]any
	if err := utiljson.Unmarshal(raw, &obj); err != nil { // int64/float64, like the API server
		return nil, err
	}
	before := runtime.DeepCopyJSON(obj)
	if pruned := structuralpruning.PruneWithOptions(obj, a.structural, true, structuralschema.UnknownFieldPathOptions{TrackUnknownFieldPaths: true}); len(pruned) > 0 {
		return nil, fmt.Errorf("pruned unknown fields %v", pruned)
	}
	structuraldefaulting.PruneNonNullableNullsWithoutDefaults(obj, a.structural)
	if !reflect.DeepEqual(before, obj) {
		return nil, fmt.Errorf("pruned nulls: %v became %v", before["spec"], obj["spec"])
	}
	return obj, nil
}
