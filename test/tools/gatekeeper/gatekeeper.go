package main

import (
	"context"
	"encoding/json"
	"fmt"

	constraintclient "github.com/open-policy-agent/frameworks/constraint/pkg/client"
	"github.com/open-policy-agent/frameworks/constraint/pkg/client/drivers/rego"
	"github.com/open-policy-agent/frameworks/constraint/pkg/client/reviews"
	"github.com/open-policy-agent/frameworks/constraint/pkg/types"
	mutationtypes "github.com/open-policy-agent/gatekeeper/v3/pkg/mutation/types"
	"github.com/open-policy-agent/gatekeeper/v3/pkg/target"
	"github.com/open-policy-agent/gatekeeper/v3/pkg/util"
	admissionv1 "k8s.io/api/admission/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

// gatekeeperSide is Gatekeeper's validating webhook minus HTTP: the constraint
// framework's client with the Rego driver and Gatekeeper's own admission target, set
// up as Gatekeeper's main sets it up for the webhook.
type gatekeeperSide struct {
	client *constraintclient.Client
	// namespace is team-a as the webhook reads it from its cache, once: its
	// namespace object goes with every review.
	namespace    *corev1.Namespace
	namespaceMap map[string]any
}

// newGatekeeperSide builds the client (Rego driver with no referential data, target
// admission.k8s.gatekeeper.sh, enforcement point of the webhook) and adds every
// translated template and constraint to it.
func newGatekeeperSide(ctx context.Context, ts []*translated) (*gatekeeperSide, error) {
	driver, err := rego.New(rego.Externs())
	if err != nil {
		return nil, err
	}
	client, err := constraintclient.NewClient(
		constraintclient.Targets(&target.K8sValidationTarget{}),
		constraintclient.Driver(driver),
		constraintclient.EnforcementPoints(util.WebhookEnforcementPoint),
	)
	if err != nil {
		return nil, err
	}
	for _, t := range ts {
		if _, err := client.AddTemplate(ctx, t.Template); err != nil {
			return nil, fmt.Errorf("template of policy %s: %w", t.Policy, err)
		}
		if _, err := client.AddConstraint(ctx, t.Constraint); err != nil {
			return nil, fmt.Errorf("constraint of policy %s: %w", t.Policy, err)
		}
	}
	ns := &corev1.Namespace{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Namespace"},
		ObjectMeta: metav1.ObjectMeta{Name: namespace, Labels: namespaceLabels},
	}
	nsMap, err := runtime.DefaultUnstructuredConverter.ToUnstructured(ns)
	if err != nil {
		return nil, err
	}
	return &gatekeeperSide{client: client, namespace: ns, namespaceMap: nsMap}, nil
}

// review is the webhook's review of creating obj: the AdmissionRequest as the API
// server sends it (the object as raw JSON, which Gatekeeper decodes on every review),
// augmented with the namespace as Gatekeeper's webhook does.
func (g *gatekeeperSide) review(obj map[string]any) (*target.AugmentedReview, error) {
	raw, err := json.Marshal(obj)
	if err != nil {
		return nil, err
	}
	req := &admissionv1.AdmissionRequest{
		UID:       "peer-run",
		Kind:      metav1.GroupVersionKind{Group: compositionGroup, Version: compositionVersion, Kind: compositionKind},
		Resource:  metav1.GroupVersionResource{Group: compositionGroup, Version: compositionVersion, Resource: compositionPlural},
		Name:      objectName,
		Namespace: namespace,
		Operation: admissionv1.Create,
		UserInfo:  authenticationv1.UserInfo{Username: username, Groups: userGroups},
		Object:    runtime.RawExtension{Raw: raw},
	}
	return &target.AugmentedReview{
		AdmissionRequest: req,
		Namespace:        g.namespace,
		Source:           mutationtypes.SourceTypeOriginal,
		IsAdmission:      true,
	}, nil
}

// check is one review, with the options the webhook passes: its enforcement point,
// no tracing, no stats, and the namespace object for input.review.namespaceObject.
func (g *gatekeeperSide) check(ctx context.Context, r *target.AugmentedReview) (*types.Responses, error) {
	return g.client.Review(ctx, r, g.reviewOpts()...)
}

func (g *gatekeeperSide) reviewOpts() []reviews.ReviewOpt {
	return []reviews.ReviewOpt{
		reviews.EnforcementPoint(util.WebhookEnforcementPoint),
		reviews.Tracing(false),
		reviews.Stats(false),
		reviews.Namespace(g.namespaceMap),
	}
}

// verdict reads Gatekeeper's responses as the verdict check compares them. The
// webhook denies on a violation whose action is deny and warns on one whose action
// is warn; a constraint is named as the policy it was translated from.
func (g *gatekeeperSide) verdict(ctx context.Context, obj map[string]any) (verdict, error) {
	r, err := g.review(obj)
	if err != nil {
		return verdict{}, err
	}
	resp, err := g.check(ctx, r)
	if err != nil {
		return verdict{}, err
	}
	var v verdict
	for _, res := range resp.Results() {
		f := finding{Policy: res.Constraint.GetName(), Message: res.Msg}
		switch res.EnforcementAction {
		case "deny":
			v.Deny = append(v.Deny, f)
		case "warn":
			v.Warn = append(v.Warn, f)
		}
	}
	v.Denied = denies(resp)
	return v.sorted(), nil
}

// denies tells whether the webhook would refuse the request, without the copying
// Responses.Results does, so that the timed loop can check it cheaply.
func denies(resp *types.Responses) bool {
	for _, r := range resp.ByTarget {
		for _, res := range r.Results {
			if res.EnforcementAction == "deny" {
				return true
			}
		}
	}
	return false
}
