package gatekeeper

import (
	"encoding/json"
	"fmt"

	"k8s.io/apiextensions-apiserver/pkg/apis/apiextensions"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apiextensions-apiserver/pkg/apiserver/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// ParametersError is a constraint whose spec.parameters its template's schema refuses.
type ParametersError struct {
	Constraint string
	Errs       field.ErrorList
}

func (e *ParametersError) Error() string {
	return fmt.Sprintf("constraint %s: %v", e.Constraint, e.Errs.ToAggregate())
}

// CheckParameters validates a constraint's spec.parameters against the template's
// spec.crd.spec.validation.openAPIV3Schema, as the API server does when the
// constraint's CRD carries that schema. A template without a schema accepts any.
func (t *Template) CheckParameters(constraint map[string]any) error {
	if t.ParametersSchema == nil {
		return nil
	}
	raw, err := json.Marshal(t.ParametersSchema)
	if err != nil {
		return err
	}
	var v1 apiextensionsv1.JSONSchemaProps
	if err := json.Unmarshal(raw, &v1); err != nil {
		return fmt.Errorf("template %s: spec.crd.spec.validation.openAPIV3Schema: %w", t.Name, err)
	}
	var internal apiextensions.JSONSchemaProps
	if err := apiextensionsv1.Convert_v1_JSONSchemaProps_To_apiextensions_JSONSchemaProps(&v1, &internal, nil); err != nil {
		return fmt.Errorf("template %s: spec.crd.spec.validation.openAPIV3Schema: %w", t.Name, err)
	}
	validator, _, err := validation.NewSchemaValidator(&internal)
	if err != nil {
		return fmt.Errorf("template %s: spec.crd.spec.validation.openAPIV3Schema: %w", t.Name, err)
	}
	params := nested(constraint, "spec", "parameters")
	if params == nil {
		return nil
	}
	if errs := validation.ValidateCustomResource(field.NewPath("spec", "parameters"), params, validator); len(errs) > 0 {
		return &ParametersError{Constraint: nestedString(constraint, "metadata", "name"), Errs: errs}
	}
	return nil
}
