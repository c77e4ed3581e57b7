package constraints

import (
	"context"
	"crypto/sha256"
	_ "embed"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/go-logr/logr"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
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
	st := c.templates[u.GetName()]
	want, err := constraintCRD(u, t, true)
	if err != nil {
		return err
	}
	// Unless the API server refused this very schema before: asking again would be a
	// refused dry run on every sync.
	if st == nil || st.schemaRefused != want.Annotations[annotationSpecHash] {
		err = c.applyConstraintCRD(ctx, want)
		if !apierrors.IsInvalid(err) || t.ParametersSchema == nil {
			return err
		}
		// A schema the API server does not take (not structural): the parameters are
		// checked by the engine instead (Template.CheckParameters), as constraints load.
		if st != nil {
			st.schemaRefused = want.Annotations[annotationSpecHash]
		}
	}
	if want, err = constraintCRD(u, t, false); err != nil {
		return err
	}
	return c.applyConstraintCRD(ctx, want)
}

// The annotations by which a constraint CRD tells whether it is as Compositor wants it,
// without comparing the spec wanted with the spec read: the API server defaults what
// it stores (spec.conversion, for one), so those never compare equal, and a
// comparison that knew the defaults would be as right as the API server version it
// was written against.
const (
	// annotationSpecHash is the hash of the spec Compositor wrote (constraintCRD's):
	// when it is the hash of the spec wanted now, what Compositor wants has not changed.
	annotationSpecHash = "compositor.dev/spec-hash"
	// annotationStoredSpecHash is the hash of the spec the API server stored from that
	// write, defaults included (see writeConstraintCRD): when it is the hash of the
	// spec read, nobody has changed the spec since.
	annotationStoredSpecHash = "compositor.dev/stored-spec-hash"
)

// deleteConstraintCRD deletes the constraint CRD of kind when it is Compositor's and
// owned by template uid alone, which is gone: as the garbage collector would, for a
// control plane without one (compositor dev). A template of the same name made since
// has taken the CRD over (applyConstraintCRD), and it stays; the preconditions keep a
// write in between from being lost.
func (c *Controller) deleteConstraintCRD(ctx context.Context, kind string, uid types.UID) {
	if !c.owned || c.ReadOnly {
		return
	}
	crd := &apiextensionsv1.CustomResourceDefinition{}
	if err := c.Client.Get(ctx, client.ObjectKey{Name: constraintResource(kind) + "." + gatekeeper.ConstraintsGroup}, crd); err != nil {
		return
	}
	if crd.Labels[labelManagedBy] != managedBy || len(crd.OwnerReferences) != 1 || crd.OwnerReferences[0].UID != uid {
		return
	}
	err := c.Client.Delete(ctx, crd, client.Preconditions{UID: &crd.UID, ResourceVersion: &crd.ResourceVersion})
	if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
		logr.FromContextOrDiscard(ctx).Info("deleting the constraint CRD of a deleted template", "crd", crd.Name, "error", err.Error())
	}
}

// errNamesNotAccepted is a constraint CRD whose names clash with another CRD's (a kind
// that is another template's kind followed by List, say): it is never served.
var errNamesNotAccepted = errors.New("its names are not accepted: they clash with another CRD's")

// namesAccepted is false when the API server has said that crd's names clash.
func namesAccepted(crd *apiextensionsv1.CustomResourceDefinition) bool {
	for _, c := range crd.Status.Conditions {
		if c.Type == apiextensionsv1.NamesAccepted && c.Status == apiextensionsv1.ConditionFalse {
			return false
		}
	}
	return true
}

// errNotCompositors is a constraint CRD of the name wanted that someone else made.
var errNotCompositors = errors.New("exists and is not Compositor's")

// applyConstraintCRD writes want, a constraint CRD from constraintCRD, when the CRD
// is not as Compositor wants it: when what Compositor wants changed (the spec hash),
// when someone else changed the spec (the stored spec hash), or its labels or owner.
// A CRD as wanted costs one read and no write.
func (c *Controller) applyConstraintCRD(ctx context.Context, want *apiextensionsv1.CustomResourceDefinition) error {
	have := &apiextensionsv1.CustomResourceDefinition{}
	err := c.Client.Get(ctx, client.ObjectKeyFromObject(want), have)
	switch {
	case apierrors.IsNotFound(err):
		return c.writeConstraintCRD(ctx, want, true)
	case err != nil:
		return err
	case have.Labels[labelManagedBy] != managedBy:
		return fmt.Errorf("CRD %s %w", want.Name, errNotCompositors)
	case !namesAccepted(have):
		return fmt.Errorf("CRD %s: %w", want.Name, errNamesNotAccepted)
	case constraintCRDCurrent(have, want):
		return nil
	}
	// What is Compositor's is put back; others' labels, annotations and owners stay.
	have.Spec = want.Spec
	if have.Labels == nil {
		have.Labels = map[string]string{}
	}
	maps.Copy(have.Labels, want.Labels)
	if have.Annotations == nil {
		have.Annotations = map[string]string{}
	}
	have.Annotations[annotationSpecHash] = want.Annotations[annotationSpecHash]
	owner := want.OwnerReferences[0]
	have.OwnerReferences = append([]metav1.OwnerReference{owner}, slices.DeleteFunc(have.OwnerReferences, func(r metav1.OwnerReference) bool {
		// a template's of the same name deleted and created again: its GC would
		// delete the CRD the new one needs
		return r.Kind == owner.Kind && strings.HasPrefix(r.APIVersion, gatekeeper.TemplatesGroup+"/")
	})...)
	return c.writeConstraintCRD(ctx, have, false)
}

// constraintCRDCurrent reports whether have, the constraint CRD read, is want: the
// spec Compositor wants is the one it wrote, the spec has not changed since the API
// server stored it, and the labels and owner Compositor sets are there.
func constraintCRDCurrent(have, want *apiextensionsv1.CustomResourceDefinition) bool {
	if have.Annotations[annotationSpecHash] != want.Annotations[annotationSpecHash] {
		return false
	}
	stored, err := specHash(&have.Spec)
	if err != nil || have.Annotations[annotationStoredSpecHash] != stored {
		return false
	}
	for k, v := range want.Labels {
		if have.Labels[k] != v {
			return false
		}
	}
	return slices.ContainsFunc(have.OwnerReferences, func(r metav1.OwnerReference) bool {
		return r.UID == want.OwnerReferences[0].UID
	})
}

// writeConstraintCRD creates or updates crd, with the hash of the spec as the API
// server will store it in annotationStoredSpecHash. That hash is known before the
// write from a dry run of the same write, which returns the object as it would be
// stored, defaults included; so it is written with the spec, in one write. Kept on
// the CRD rather than in memory, it holds across restarts and for every replica, and
// is not tied to what this Kubernetes version defaults. (Dry runs are refused only by
// admission webhooks with side effects, which admissionregistration/v1 no longer
// allows.)
func (c *Controller) writeConstraintCRD(ctx context.Context, crd *apiextensionsv1.CustomResourceDefinition, create bool) error {
	write := func(obj *apiextensionsv1.CustomResourceDefinition, dryRun []string) error {
		if create {
			return c.Client.Create(ctx, obj, &client.CreateOptions{DryRun: dryRun})
		}
		return c.Client.Update(ctx, obj, &client.UpdateOptions{DryRun: dryRun})
	}
	delete(crd.Annotations, annotationStoredSpecHash)
	trial := crd.DeepCopy()
	if err := write(trial, []string{metav1.DryRunAll}); err != nil {
		return err
	}
	stored, err := specHash(&trial.Spec)
	if err != nil {
		return err
	}
	crd.Annotations[annotationStoredSpecHash] = stored
	err = write(crd, nil)
	if apierrors.IsConflict(err) || apierrors.IsAlreadyExists(err) {
		// Written by another replica (or someone) since it was read: the next sync
		// reads it again.
		logr.FromContextOrDiscard(ctx).V(1).Info("a constraint CRD changed while it was written", "crd", crd.Name)
		return nil
	}
	return err
}

// specHash is the hash of a CRD spec's JSON, which encoding/json writes the same for
// the same spec (struct fields in order, map keys sorted).
func specHash(spec *apiextensionsv1.CustomResourceDefinitionSpec) (string, error) {
	raw, err := json.Marshal(spec)
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256(raw)
	return hex.EncodeToString(sum[:]), nil
}

// constraintCRD is the CRD of t's constraints, owned by template u, with the hash of
// its spec in annotationSpecHash; withSchema false leaves spec.parameters unchecked
// by the API server.
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
	glob := apiextensionsv1.JSONSchemaProps{Type: "string", Pattern: gatekeeper.WildcardPattern}
	globs := apiextensionsv1.JSONSchemaProps{Type: "array", Items: &apiextensionsv1.JSONSchemaPropsOrArray{Schema: &glob}}
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
		"namespaces":         globs,
		"excludedNamespaces": globs,
		"labelSelector":      preserve,
		"namespaceSelector":  preserve,
		"name":               glob,
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
	crd := &apiextensionsv1.CustomResourceDefinition{
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
	}
	hash, err := specHash(&crd.Spec)
	if err != nil {
		return nil, err
	}
	crd.Annotations = map[string]string{annotationSpecHash: hash}
	return crd, nil
}
