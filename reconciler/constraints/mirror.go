package constraints

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/compositor-dev/compositor/generators/rbac"
	"github.com/compositor-dev/compositor/policies"
	"github.com/compositor-dev/compositor/policies/gatekeeper"
)

// The mirror is how the generated controller Deployments get the constraints in force:
// their RBAC names every resource they read, and constraint kinds come and go with
// templates. compositor serve writes the templates and constraints it enforces into
// ConfigMap rbac.ConstraintsConfigMap of its namespace, which the controllers may read
// by name, and they judge at their install gate with what it holds.

// mirrorKey is the ConfigMap's key: the gzipped JSON of a mirrorDoc.
const mirrorKey = "library.json.gz"

// maxMirrorBytes bounds the mirror below a ConfigMap's limit of 1 MiB.
const maxMirrorBytes = 900 << 10

type mirrorDoc struct {
	Templates   []map[string]any `json:"templates"`
	Constraints []map[string]any `json:"constraints"`
}

// trimmed keeps of an object what compiling or matching it reads: apiVersion, kind,
// the name and annotations, and spec.
func trimmed(obj map[string]any) map[string]any {
	md, _ := obj["metadata"].(map[string]any)
	keep := map[string]any{"name": md["name"]}
	if a, ok := md["annotations"].(map[string]any); ok && len(a) > 0 {
		// kubectl's copy of the whole object would double the mirror, which a
		// ConfigMap's 1 MiB bounds.
		a = maps.Clone(a)
		delete(a, "kubectl.kubernetes.io/last-applied-configuration")
		if len(a) > 0 {
			keep["annotations"] = a
		}
	}
	return map[string]any{"apiVersion": obj["apiVersion"], "kind": obj["kind"], "metadata": keep, "spec": obj["spec"]}
}

func encodeMirror(doc mirrorDoc) ([]byte, error) {
	name := func(o map[string]any) string {
		md, _ := o["metadata"].(map[string]any)
		return fmt.Sprint(o["kind"], "/", md["name"])
	}
	for _, list := range [][]map[string]any{doc.Templates, doc.Constraints} {
		slices.SortFunc(list, func(a, b map[string]any) int { return strings.Compare(name(a), name(b)) })
	}
	raw, err := json.Marshal(doc)
	if err != nil {
		return nil, err
	}
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf) // no name, no time: the same library, the same bytes
	if _, err := zw.Write(raw); err != nil {
		return nil, err
	}
	if err := zw.Close(); err != nil {
		return nil, err
	}
	if buf.Len() > maxMirrorBytes {
		return nil, fmt.Errorf("the templates and constraints take %d bytes gzipped, more than a ConfigMap holds (%d)", buf.Len(), maxMirrorBytes)
	}
	return buf.Bytes(), nil
}

// DecodeMirror compiles what a mirror ConfigMap holds into a library. A template that
// does not compile here, or a constraint that does not parse, is an error: the
// controller then keeps the constraints it had.
func DecodeMirror(cm *corev1.ConfigMap) (*gatekeeper.Library, error) {
	doc, err := decodeMirror(cm)
	if err != nil {
		return nil, err
	}
	var templates []*gatekeeper.Template
	for _, obj := range doc.Templates {
		t, err := compileObject(context.Background(), obj)
		if err != nil {
			return nil, fmt.Errorf("ConfigMap %s/%s: template %v: %w", cm.Namespace, cm.Name, trimmed(obj)["metadata"], err)
		}
		templates = append(templates, t)
	}
	var cons []*gatekeeper.Constraint
	for _, obj := range doc.Constraints {
		c, err := gatekeeper.ParseConstraint(obj)
		if err != nil {
			return nil, fmt.Errorf("ConfigMap %s/%s: %w", cm.Namespace, cm.Name, err)
		}
		cons = append(cons, c)
	}
	return gatekeeper.NewLibrary(templates, cons), nil
}

// decodeMirror reads what a mirror ConfigMap holds.
func decodeMirror(cm *corev1.ConfigMap) (*mirrorDoc, error) {
	data, ok := cm.BinaryData[mirrorKey]
	if !ok {
		return nil, fmt.Errorf("ConfigMap %s/%s has no key %s", cm.Namespace, cm.Name, mirrorKey)
	}
	zr, err := gzip.NewReader(bytes.NewReader(data))
	if err != nil {
		return nil, fmt.Errorf("ConfigMap %s/%s: %w", cm.Namespace, cm.Name, err)
	}
	raw, err := io.ReadAll(io.LimitReader(zr, 64<<20))
	if err != nil {
		return nil, fmt.Errorf("ConfigMap %s/%s: %w", cm.Namespace, cm.Name, err)
	}
	var doc mirrorDoc
	if err := json.Unmarshal(raw, &doc); err != nil {
		return nil, fmt.Errorf("ConfigMap %s/%s: %w", cm.Namespace, cm.Name, err)
	}
	return &doc, nil
}

// readMirrorTemplates is the templates of the mirror ConfigMap, by name, as the
// process found it when it started: the last versions that compiled. None when
// there is no mirror; the mirror is Compositor's own record, in its namespace.
func (c *Controller) readMirrorTemplates(ctx context.Context) map[string]map[string]any {
	if c.MirrorNamespace == "" {
		return nil
	}
	cm := &corev1.ConfigMap{}
	err := c.Client.Get(ctx, client.ObjectKey{Namespace: c.MirrorNamespace, Name: rbac.ConstraintsConfigMap}, cm)
	var doc *mirrorDoc
	if err == nil {
		doc, err = decodeMirror(cm)
	}
	if err != nil {
		if !apierrors.IsNotFound(err) {
			logr.FromContextOrDiscard(ctx).Info("cannot read the last templates in force", "error", err.Error())
		}
		return nil
	}
	out := make(map[string]map[string]any, len(doc.Templates))
	for _, obj := range doc.Templates {
		if md, ok := obj["metadata"].(map[string]any); ok {
			if name, ok := md["name"].(string); ok {
				out[name] = obj
			}
		}
	}
	return out
}

// writeMirror makes the mirror ConfigMap hold doc, when MirrorNamespace is set.
func (c *Controller) writeMirror(ctx context.Context, doc mirrorDoc) {
	if c.MirrorNamespace == "" || c.ReadOnly {
		return
	}
	log := logr.FromContextOrDiscard(ctx)
	data, err := encodeMirror(doc)
	if err != nil {
		log.Error(err, "the generated controllers cannot get the constraints in force")
		return
	}
	cm := &corev1.ConfigMap{}
	key := client.ObjectKey{Namespace: c.MirrorNamespace, Name: rbac.ConstraintsConfigMap}
	err = c.Client.Get(ctx, key, cm)
	switch {
	case apierrors.IsNotFound(err):
		cm = &corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name, Labels: map[string]string{labelManagedBy: managedBy}},
			BinaryData: map[string][]byte{mirrorKey: data},
		}
		if c.MirrorOwner != nil {
			if owner := c.MirrorOwner(ctx); owner != nil {
				cm.OwnerReferences = []metav1.OwnerReference{*owner}
			}
		}
		err = c.Client.Create(ctx, cm)
	case err == nil && !bytes.Equal(cm.BinaryData[mirrorKey], data):
		cm.BinaryData = map[string][]byte{mirrorKey: data}
		cm.Data = nil
		err = c.Client.Update(ctx, cm)
	}
	if err != nil && !apierrors.IsConflict(err) && !apierrors.IsAlreadyExists(err) {
		log.Error(err, "writing the constraints for the generated controllers", "configMap", key)
	}
}

// Follower keeps an engine's constraints those of the mirror ConfigMap: the generated
// controllers' side.
type Follower struct {
	Clientset kubernetes.Interface
	Namespace string
	Engine    *policies.Engine
}

// Load reads the mirror once; no ConfigMap means no constraints. A controller loads
// before its first install.
func (f *Follower) Load(ctx context.Context) error {
	cm, err := f.Clientset.CoreV1().ConfigMaps(f.Namespace).Get(ctx, rbac.ConstraintsConfigMap, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		f.Engine.SetConstraints(policies.OriginObject, nil)
		return nil
	}
	if err != nil {
		return fmt.Errorf("reading the Gatekeeper constraints, ConfigMap %s/%s: %w", f.Namespace, rbac.ConstraintsConfigMap, err)
	}
	lib, err := DecodeMirror(cm)
	if err != nil {
		return err
	}
	f.Engine.SetConstraints(policies.OriginObject, lib)
	return nil
}

// NeedLeaderElection: every replica judges with its own engine.
func (f *Follower) NeedLeaderElection() bool { return false }

// Start follows the mirror until ctx ends.
func (f *Follower) Start(ctx context.Context) error {
	log := logr.FromContextOrDiscard(ctx).WithName("constraints")
	lw := cache.NewListWatchFromClient(f.Clientset.CoreV1().RESTClient(), "configmaps", f.Namespace,
		fields.OneTermEqualSelector("metadata.name", rbac.ConstraintsConfigMap))
	apply := func(obj any) {
		cm, ok := obj.(*corev1.ConfigMap)
		if !ok {
			return
		}
		lib, err := DecodeMirror(cm)
		if err != nil {
			log.Error(err, "the constraints in force stay as they were")
			return
		}
		f.Engine.SetConstraints(policies.OriginObject, lib)
	}
	_, inf := cache.NewInformerWithOptions(cache.InformerOptions{
		ListerWatcher: lw,
		ObjectType:    &corev1.ConfigMap{},
		Handler: cache.ResourceEventHandlerFuncs{
			AddFunc:    apply,
			UpdateFunc: func(_, obj any) { apply(obj) },
			// serve never deletes the mirror (no constraint is an empty one) and writes
			// it again: until then, the constraints in force stay.
			DeleteFunc: func(any) { log.Info("the constraints' ConfigMap was deleted; the constraints in force stay") },
		},
	})
	inf.Run(ctx.Done())
	return nil
}
