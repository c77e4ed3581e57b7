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
	raw, err := json.Marshal(map[string]any{
		"apiVersion": a.apiVersion, "kind": a.kind,
		"metadata": map[string]any{"name": "x", "namespace": "default"},
		"spec":     spec,
	})
	if err != nil {
		return err
	}
	var obj map[string]any
	if err := utiljson.Unmarshal(raw, &obj); err != nil { // int64/float64, like the API server
		return err
	}
	before := runtime.DeepCopyJSON(obj)
	if pruned := structuralpruning.PruneWithOptions(obj, a.structural, true, structuralschema.UnknownFieldPathOptions{TrackUnknownFieldPaths: true}); len(pruned) > 0 {
		return fmt.Errorf("pruned unknown fields %v", pruned)
	}
	structuraldefaulting.PruneNonNullableNullsWithoutDefaults(obj, a.structural)
	if !reflect.DeepEqual(before, obj) {
		return fmt.Errorf("pruned nulls: %v became %v", before["spec"], obj["spec"])
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
