package app

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"

	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/restmapper"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/compositor-dev/compositor/api"
	corev1alpha1 "github.com/compositor-dev/compositor/api/core/v1alpha1"
	"github.com/compositor-dev/compositor/api/vocab"
)

// RollbackOptions configure `compositor rollback`.
type RollbackOptions struct {
	// Namespace of the composition ("" is the kubeconfig's).
	Namespace string
	// To is the revision to restore: a number, or "previous" (the default), the one
	// before the newest.
	To string
	// Kubeconfig is the cluster ("" as kubectl finds it).
	Kubeconfig string
}

// rollbackPrevious is --to's default: the revision before the newest.
const rollbackPrevious = "previous"

func newRollbackCommand() *cobra.Command {
	opts := &RollbackOptions{To: rollbackPrevious}
	cmd := &cobra.Command{
		Use:   "rollback KIND/NAME [-n NAMESPACE] [--to N] [--kubeconfig FILE]",
		Short: "Restore a composition's spec and chart version from one of its revisions",
		Long: `rollback restores a composition to one of its revisions: the CompositionRevisions
Compositor keeps of each install or upgrade of its Helm release (the definition's
spec.upgrade.revisionHistoryLimit newest; kubectl get compositionrevisions -l
compositor.dev/composition-name=NAME). Revision numbers are those of helm history.

It sets the annotation compositor.dev/rollback-to on the composition. Compositor's
mutating webhook proves the revision (sealed by Compositor, and of this composition),
restores its spec and pins the composition to the version that installed it, then the
write is judged like any other: the chart's schema and the policies in force now may
refuse it, and their refusal is printed as the API server gives it. Once admitted, the
controller of that version installs it, as a new revision.

Without --to it restores the revision before the newest one.`,
		Example: `  compositor rollback fireworksapp/shop -n team-a

  compositor rollback fireworksapps.composition.krateo.io/shop -n team-a --to 3`,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) != 1 || !strings.Contains(args[0], "/") {
				return usageErrorf("rollback takes one argument, KIND/NAME, got %q", args)
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			_, err := RunRollback(cmd.Context(), cmd.OutOrStdout(), opts, args[0])
			return err
		},
	}
	cmd.SetFlagErrorFunc(flagUsageError)
	fs := cmd.Flags()
	fs.StringVarP(&opts.Namespace, "namespace", "n", opts.Namespace, "Namespace of the composition (default the kubeconfig's)")
	fs.StringVar(&opts.To, "to", opts.To, `Revision to restore: its number, or "previous"`)
	fs.StringVar(&opts.Kubeconfig, "kubeconfig", opts.Kubeconfig, "Kubeconfig of the cluster (default as kubectl finds it)")
	return cmd
}

// RunRollback restores the composition ref (KIND/NAME) to the revision opts.To names,
// by writing compositor.dev/rollback-to, and prints the revision restored. It returns
// that revision, or the API server's refusal as it gave it.
func RunRollback(ctx context.Context, out io.Writer, opts *RollbackOptions, ref string) (*corev1alpha1.CompositionRevision, error) {
	kind, name, ok := strings.Cut(ref, "/")
	if !ok || kind == "" || name == "" {
		return nil, usageErrorf("rollback takes KIND/NAME, got %q", ref)
	}
	to := opts.To
	if to == "" {
		to = rollbackPrevious
	}
	if to != rollbackPrevious {
		if n, err := strconv.ParseInt(to, 10, 64); err != nil || n < 1 {
			return nil, usageErrorf("--to is a revision number or %q, got %q", rollbackPrevious, to)
		}
	}
	cfg, namespace, err := kubeconfigFor(opts.Kubeconfig)
	if err != nil {
		return nil, err
	}
	if opts.Namespace != "" {
		namespace = opts.Namespace
	}
	mapping, err := compositionMapping(cfg, kind)
	if err != nil {
		return nil, err
	}
	scheme, err := api.NewScheme()
	if err != nil {
		return nil, err
	}
	c, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		return nil, fmt.Errorf("connecting to the cluster: %w", err)
	}
	obj := &unstructured.Unstructured{}
	obj.SetGroupVersionKind(mapping.GroupVersionKind)
	if err := c.Get(ctx, client.ObjectKey{Namespace: namespace, Name: name}, obj); err != nil {
		return nil, fmt.Errorf("reading %s %s/%s: %w", mapping.GroupVersionKind.Kind, namespace, name, err)
	}
	// Which revision: the webhook proves it; this only names it, so that what is printed
	// is what was restored.
	revs := &corev1alpha1.CompositionRevisionList{}
	if err := c.List(ctx, revs, client.InNamespace(namespace), client.MatchingLabels{vocab.LabelCompositionUID: string(obj.GetUID())}); err != nil {
		return nil, fmt.Errorf("listing the CompositionRevisions of %s %s/%s: %w", obj.GetKind(), namespace, name, err)
	}
	rev := chooseRevision(revs.Items, obj.GetUID(), to)
	if rev != nil {
		to = strconv.FormatInt(rev.Revision, 10)
	}
	// With its UID, the patch holds only on the composition read (the API server refuses
	// to change a UID): the revisions listed are its own.
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{
		"uid":         obj.GetUID(),
		"annotations": map[string]string{vocab.AnnotationRollbackTo: to},
	}})
	if err != nil {
		return nil, err
	}
	if err := c.Patch(ctx, obj.DeepCopy(), client.RawPatch(types.MergePatchType, patch), client.FieldOwner("compositor-rollback")); err != nil {
		return nil, err
	}
	if rev == nil {
		// Found no record to name; admission restored the one it proved.
		fmt.Fprintf(out, "%s %s/%s: restored revision %s\n", obj.GetKind(), namespace, name, to)
		return nil, nil
	}
	author := rev.Author
	if author == "" {
		author = "unknown"
	}
	fmt.Fprintf(out, "%s %s/%s: restored revision %d (chart %s, version %s, spec by %s, installed %s); the controller of %s installs it as a new revision\n",
		obj.GetKind(), namespace, name, rev.Revision, rev.ChartVersion, rev.ServedVersion, author, rev.Time.UTC().Format("2006-01-02T15:04:05Z"), rev.ServedVersion)
	return rev, nil
}

// chooseRevision is the revision of uid that to names among revs: the one numbered to,
// or for "previous" the second newest; nil when there is none.
func chooseRevision(revs []corev1alpha1.CompositionRevision, uid types.UID, to string) *corev1alpha1.CompositionRevision {
	var own []*corev1alpha1.CompositionRevision
	for i := range revs {
		if revs[i].Composition.UID == uid {
			own = append(own, &revs[i])
		}
	}
	slices.SortFunc(own, func(a, b *corev1alpha1.CompositionRevision) int { return int(b.Revision - a.Revision) })
	if to == rollbackPrevious {
		if len(own) < 2 {
			return nil
		}
		return own[1]
	}
	for _, r := range own {
		if strconv.FormatInt(r.Revision, 10) == to {
			return r
		}
	}
	return nil
}

// compositionMapping resolves kind, as kubectl takes it (fireworksapp, fireworksapps,
// FireworksApp, fireworksapps.composition.krateo.io or
// fireworksapps.v1-1-5.composition.krateo.io), to a generated kind.
func compositionMapping(cfg *rest.Config, kind string) (*meta.RESTMapping, error) {
	dc, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("connecting to the cluster: %w", err)
	}
	mapper := restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(dc))
	gvr, gr := schema.ParseResourceArg(strings.ToLower(kind))
	if gr.Group == "" {
		gr.Group = vocab.CompositionGroup
	}
	want := gr.WithVersion("")
	if gvr != nil && gvr.Group == vocab.CompositionGroup {
		want = *gvr
	}
	resolved, err := mapper.ResourceFor(want)
	if err != nil {
		return nil, fmt.Errorf("%s is not a kind of %s: %w", kind, vocab.CompositionGroup, err)
	}
	if resolved.Group != vocab.CompositionGroup {
		return nil, fmt.Errorf("%s is not a kind of %s", kind, vocab.CompositionGroup)
	}
	gvk, err := mapper.KindFor(resolved)
	if err != nil {
		return nil, err
	}
	return mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
}
