package constraints

import (
	"context"
	"crypto/sha256"
	_ "embed"
	"encoding/hex"
	"encoding/json"
	"fmt"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/compositor-dev/compositor/policies/gatekeeper"
)

//go:embed constrainttemplate-crd.yaml
var templateCRDYAML []byte

// TemplateCRDName is the ConstraintTemplate CRD's name, Gatekeeper's and Compositor's.
const TemplateCRDName = "constrainttemplates." + gatekeeper.TemplatesGroup

const (
	labelManagedBy = "app.kubernetes.io/managed-by"
	managedBy      = "compositor"
)

// TemplateCRD is the ConstraintTemplate CRD Compositor serves when Gatekeeper is not
// installed.
func TemplateCRD() (*apiextensionsv1.CustomResourceDefinition, error) {
	crd := &apiextensionsv1.CustomResourceDefinition{}
	if err := yaml.UnmarshalStrict(templateCRDYAML, crd); err != nil {
		return nil, fmt.Errorf("the embedded ConstraintTemplate CRD: %w", err)
	}
	return crd, nil
}

// EnsureTemplateCRD creates the ConstraintTemplate CRD when it does not exist, and
// leaves one that does (Gatekeeper's, or Compositor's from before) as it is.
func EnsureTemplateCRD(ctx context.Context, c client.Client) error {
	crd, err := TemplateCRD()
	if err != nil {
		return err
	}
	err = c.Create(ctx, crd)
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("creating the ConstraintTemplate CRD: %w", err)
	}
	return nil
}

// TemplateCRDOwned reports whether the ConstraintTemplate CRD is Compositor's.
func TemplateCRDOwned(ctx context.Context, c client.Client) (bool, error) {
	crd := &apiextensionsv1.CustomResourceDefinition{}
	if err := c.Get(ctx, client.ObjectKey{Name: TemplateCRDName}, crd); err != nil {
		return false, fmt.Errorf("reading the ConstraintTemplate CRD: %w", err)
	}
	return crd.Labels[labelManagedBy] == managedBy, nil
}

// ensureConstraintCRD creates or updates the CRD of t's constraints, as Gatekeeper
// makes it: cluster-scoped, in constraints.gatekeeper.sh, served as v1beta1 (stored),
// v1 and v1alpha1, with spec.parameters checked by the template's schema.
func (c *Controller) ensureConstraintCRD(ctx context.Context, u *unstructured.Unstructured, t *gatekeeper.Template) error {
	err := c.applyConstraintCRD(ctx, u, t, true)
	if apierrors.IsInvalid(err) && t.ParametersSchema != nil {
		// A schema the API server does not take (not structural): the parameters are
		// checked by the engine instead (Template.CheckParameters), as constraints load.
		err = c.applyConstraintCRD(ctx, u, t, false)
	}
	return err
}

func (c *Controller) applyConstraintCRD(ctx context.Context, u *unstructured.Unstructured, t *gatekeeper.Template, withSchema bool) error {
	want, err := constraintCRD(u, t, withSchema)
	if err != nil {
		return err
	}
	// The API server defaults what it stores, so the spec written is known by its
	// hash, kept in an annotation: an unchanged template writes nothing.
	raw, err := json.Marshal(want.Spec)
	if err != nil {
		return err
	}
	sum := sha256.Sum256(raw)
	hash := hex.EncodeToString(sum[:])
	want.Annotations = map[string]string{annotationSpecHash: hash}
	have := &apiextensionsv1.CustomResourceDefinition{}
	err = c.Client.Get(ctx, client.ObjectKeyFromObject(want), have)
	switch {
	case apierrors.IsNotFound(err):
		return c.Client.Create(ctx, want)
	case err != nil:
		return err
	case have.Labels[labelManagedBy] != managedBy:
		return fmt.Errorf("CRD %s exists and is not Compositor's", want.Name)
	case have.Annotations[annotationSpecHash] == hash:
		return nil
	}
	have.Spec = want.Spec
	if have.Annotations == nil {
		have.Annotations = map[string]string{}
	}
	have.Annotations[annotationSpecHash] = hash
	return c.Client.Update(ctx, have)
}

// annotationSpecHash keeps, on a constraint CRD, the hash of the spec Compositor wrote.
const annotationSpecHash = "compositor.dev/spec-hash"

func constraintCRD(u *unstructured.Unstructured, t *gatekeeper.Template, withSchema bool) (*apiextensionsv1.CustomResourceDefinition, error) {
	params := apiextensionsv1.JSONSchemaProps{Type: "object", XPreserveUnknownFields: ptr.To(true)}
	if t.ParametersSchema != nil && withSchema {
		raw, err := json.Marshal(t.ParametersSchema)
		if err == nil {
			err = json.Unmarshal(raw, &params)
		}
		if err != nil {
			return nil, fmt.Errorf("spec.crd.spec.validation.openAPIV3Schema: %w", err)
		}
		// Fields the schema does not name are kept, as Gatekeeper keeps them for
		// templates written before structural schemas.
		params.XPreserveUnknownFields = ptr.To(true)
		if params.Type == "" {
			params.Type = "object"
		}
	}
	preserve := apiextensionsv1.JSONSchemaProps{Type: "object", XPreserveUnknownFields: ptr.To(true)}
	str := apiextensionsv1.JSONSchemaProps{Type: "string"}
	strs := apiextensionsv1.JSONSchemaProps{Type: "array", Items: &apiextensionsv1.JSONSchemaPropsOrArray{Schema: &str}}
	enum := func(values ...string) apiextensionsv1.JSONSchemaProps {
		p := apiextensionsv1.JSONSchemaProps{Type: "string"}
		for _, v := range values {
			p.Enum = append(p.Enum, apiextensionsv1.JSON{Raw: []byte(`"` + v + `"`)})
		}
		return p
	}
	// Gatekeeper's match, typed as its CRDs type it: a match the API server takes is
	// one the engine reads the same way.
	kind := apiextensionsv1.JSONSchemaProps{Type: "object", Properties: map[string]apiextensionsv1.JSONSchemaProps{"apiGroups": strs, "kinds": strs}}
	match := apiextensionsv1.JSONSchemaProps{Type: "object", Properties: map[string]apiextensionsv1.JSONSchemaProps{
		"kinds":              {Type: "array", Items: &apiextensionsv1.JSONSchemaPropsOrArray{Schema: &kind}},
		"scope":              enum("*", "Cluster", "Namespaced"),
		"namespaces":         strs,
		"excludedNamespaces": strs,
		"labelSelector":      preserve,
		"namespaceSelector":  preserve,
		"name":               str,
		"source":             enum("All", "Original", "Generated"),
	}}
	schema := &apiextensionsv1.CustomResourceValidation{OpenAPIV3Schema: &apiextensionsv1.JSONSchemaProps{
		Type: "object",
		Properties: map[string]apiextensionsv1.JSONSchemaProps{
			"apiVersion": {Type: "string"},
			"kind":       {Type: "string"},
			"metadata":   {Type: "object", Properties: map[string]apiextensionsv1.JSONSchemaProps{"name": {Type: "string", MaxLength: ptr.To[int64](63)}}},
			"spec": {Type: "object", Properties: map[string]apiextensionsv1.JSONSchemaProps{
				"match":                    match,
				"parameters":               params,
				"enforcementAction":        enum(gatekeeper.ActionDeny, gatekeeper.ActionDryRun, gatekeeper.ActionWarn, "scoped"),
				"scopedEnforcementActions": {Type: "array", Items: &apiextensionsv1.JSONSchemaPropsOrArray{Schema: &preserve}},
			}},
			"status": preserve,
		},
	}}
	version := func(name string, storage bool) apiextensionsv1.CustomResourceDefinitionVersion {
		return apiextensionsv1.CustomResourceDefinitionVersion{
			Name: name, Served: true, Storage: storage, Schema: schema,
			Subresources: &apiextensionsv1.CustomResourceSubresources{Status: &apiextensionsv1.CustomResourceSubresourceStatus{}},
			AdditionalPrinterColumns: []apiextensionsv1.CustomResourceColumnDefinition{
				{Name: "Enforcement-Action", Type: "string", JSONPath: ".spec.enforcementAction"},
				{Name: "Age", Type: "date", JSONPath: ".metadata.creationTimestamp"},
			},
		}
	}
	plural := constraintResource(t.Kind)
	return &apiextensionsv1.CustomResourceDefinition{
		ObjectMeta: metav1.ObjectMeta{
			Name:   plural + "." + gatekeeper.ConstraintsGroup,
			Labels: map[string]string{labelManagedBy: managedBy, "gatekeeper.sh/constraint": "yes"},
			OwnerReferences: []metav1.OwnerReference{{
				APIVersion: u.GetAPIVersion(), Kind: u.GetKind(), Name: u.GetName(), UID: u.GetUID(),
			}},
		},
		Spec: apiextensionsv1.CustomResourceDefinitionSpec{
			Group: gatekeeper.ConstraintsGroup,
			Scope: apiextensionsv1.ClusterScoped,
			Names: apiextensionsv1.CustomResourceDefinitionNames{
				Kind: t.Kind, ListKind: t.Kind + "List", Plural: plural, Singular: plural,
				Categories: []string{"constraint", "constraints"},
			},
			Versions: []apiextensionsv1.CustomResourceDefinitionVersion{
				version("v1beta1", true), version("v1", false), version("v1alpha1", false),
			},
		},
	}, nil
}
