package app

import (
	"bytes"
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/types"

	corev1alpha1 "github.com/compositor-dev/compositor/api/core/v1alpha1"
)

func TestChooseRevision(t *testing.T) {
	rev := func(n int64, uid types.UID) corev1alpha1.CompositionRevision {
		r := corev1alpha1.CompositionRevision{Revision: n}
		r.Composition.UID = uid
		return r
	}
	revs := []corev1alpha1.CompositionRevision{rev(2, "uid-x"), rev(5, "uid-x"), rev(9, "uid-y"), rev(3, "uid-x")}
	assert.Equal(t, int64(3), chooseRevision(revs, "uid-x", "previous").Revision, "the one before the newest of this composition")
	assert.Equal(t, int64(2), chooseRevision(revs, "uid-x", "2").Revision)
	assert.Nil(t, chooseRevision(revs, "uid-x", "9"), "another composition's")
	assert.Nil(t, chooseRevision(revs[:1], "uid-x", "previous"))
}

func TestRollbackRefusesAWrongCommandLine(t *testing.T) {
	for _, args := range [][]string{{"rollback"}, {"rollback", "shop"}, {"rollback", "fireworksapp/shop", "--to", "last"}, {"rollback", "fireworksapp/shop", "--to", "0"}, {"rollback", "/shop"}} {
		cmd := NewCommand()
		cmd.SetArgs(append(args, "--kubeconfig", "/nonexistent"))
		var out bytes.Buffer
		cmd.SetOut(&out)
		cmd.SetErr(&out)
		err := cmd.ExecuteContext(context.Background())
		require.Error(t, err, "%v", args)
		assert.ErrorIs(t, err, ErrUsage, "%v", args)
	}
}
