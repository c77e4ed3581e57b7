package plan_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/compositor-dev/compositor/plan"
)

func computeKeyed(t *testing.T, key []byte, compositions []map[string]any) *plan.Plan {
	t.Helper()
	p, err := plan.Compute(context.Background(), plan.Options{From: load(t, "1.1.5"), To: load(t, "2.0.0"), DigestKey: key}, compositions)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// TestKeyedValuesDigest: under a key, a composition's digest is an HMAC that the plain
// SHA-256 of its values (a guess confirmed offline) is not; equal values give equal
// digests, and so equal plans, under one key, and other digests under another.
func TestKeyedValuesDigest(t *testing.T) {
	key := []byte("0123456789abcdef0123456789abcdef")
	p := computeKeyed(t, key, threeCompositions(t))
	again := computeKeyed(t, key, threeCompositions(t))
	if p.Hash != again.Hash {
		t.Fatalf("the same compositions under the same key give plans %s and %s", p.Hash, again.Hash)
	}
	other := computeKeyed(t, []byte("another key, another digest....."), threeCompositions(t))
	for i, c := range p.Compositions {
		if c.ValuesDigest == "" {
			continue
		}
		if !strings.HasPrefix(c.ValuesDigest, plan.KeyedDigest) {
			t.Errorf("%s: digest %s is not keyed", c.Name, c.ValuesDigest)
		}
		if c.ValuesDigest != again.Compositions[i].ValuesDigest {
			t.Errorf("%s: equal values, digests %s and %s", c.Name, c.ValuesDigest, again.Compositions[i].ValuesDigest)
		}
		if c.ValuesDigest == other.Compositions[i].ValuesDigest {
			t.Errorf("%s: two keys give the same digest %s", c.Name, c.ValuesDigest)
		}
		b, err := json.Marshal(c.Values)
		if err != nil {
			t.Fatal(err)
		}
		sum := sha256.Sum256(b)
		if strings.HasSuffix(c.ValuesDigest, hex.EncodeToString(sum[:])) {
			t.Errorf("%s: the keyed digest is the plain SHA-256 of the values", c.Name)
		}
	}
	unkeyed := compute(t, threeCompositions(t))
	if !strings.HasPrefix(unkeyed.Compositions[2].ValuesDigest, plan.PlainDigest) {
		t.Errorf("without a key, want a plain digest, got %s", unkeyed.Compositions[2].ValuesDigest)
	}
}

// TestView: a namespace's view lists its compositions and the whole plan's counts and
// hash, nothing of the others; it checks, and a change to it does not.
func TestView(t *testing.T) {
	compositions := threeCompositions(t)
	payroll := composition(t, "payroll-eu-v2-enterprise", "  service:\n    type: LoadBalancer\n")
	payroll["metadata"].(map[string]any)["namespace"] = "payroll"
	p := computeKeyed(t, []byte("0123456789abcdef0123456789abcdef"), append(compositions, payroll))
	if err := p.Check(); err != nil {
		t.Fatalf("the whole plan: %v", err)
	}

	v, err := p.View("team-a")
	if err != nil {
		t.Fatal(err)
	}
	if err := v.Check(); err != nil {
		t.Fatalf("the view: %v", err)
	}
	if v.Hash != p.Hash || v.Summary != p.Summary || v.Summary.ToMove != 4 {
		t.Errorf("want the whole plan's hash and counts, got %s %+v", v.Hash, v.Summary)
	}
	if v.Scope.Namespace != "team-a" || v.Scope.Summary.ToMove != 3 || len(v.Compositions) != 3 {
		t.Errorf("want team-a's 3 compositions, got %+v and %d", v.Scope, len(v.Compositions))
	}
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	for _, leak := range []string{"payroll", p.Compositions[0].ValuesDigest} {
		if strings.Contains(string(b), leak) {
			t.Errorf("team-a's view holds %q: %s", leak, b)
		}
	}
	if p.Compositions[0].Namespace != "payroll" {
		t.Fatalf("want payroll first, got %s", p.Compositions[0].Namespace)
	}

	v.Compositions[0].Refused = nil
	if err := v.Check(); !errors.Is(err, plan.ErrAltered) {
		t.Errorf("a view changed by hand checks: %v", err)
	}
	p.Compositions[1].Name = "renamed"
	if err := p.Check(); !errors.Is(err, plan.ErrAltered) {
		t.Errorf("a plan changed by hand checks: %v", err)
	}
}

// TestVerifyView: a view edited and its digest computed again, as anyone who may write
// it can, still checks; only the digest recorded apart from it tells it from the view
// written. Without a record no view verifies; a whole plan verifies by its hash.
func TestVerifyView(t *testing.T) {
	p := computeKeyed(t, []byte("0123456789abcdef0123456789abcdef"), threeCompositions(t))
	v, err := p.View("team-a")
	if err != nil {
		t.Fatal(err)
	}
	recorded := v.Scope.Digest
	if err := v.Verify(p.Hash, recorded); err != nil {
		t.Fatalf("the view as written: %v", err)
	}
	if err := p.Verify(p.Hash, ""); err != nil {
		t.Fatalf("the whole plan: %v", err)
	}

	forged := *v
	forged.Scope = &plan.Scope{Namespace: v.Scope.Namespace, Summary: v.Scope.Summary}
	forged.Summary.Refused, forged.RBAC = 0, plan.RBACChange{}
	b, err := json.Marshal(&forged)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(b)
	forged.Scope.Digest = plan.PlainDigest + hex.EncodeToString(sum[:])
	if err := forged.Check(); err != nil {
		t.Fatalf("the forgery does not check, so this test shows nothing: %v", err)
	}
	if err := forged.Verify(p.Hash, recorded); !errors.Is(err, plan.ErrAltered) {
		t.Errorf("a forged view verifies against the recorded digest: %v", err)
	}
	if err := v.Verify(p.Hash, ""); !errors.Is(err, plan.ErrUnrecorded) {
		t.Errorf("a view verifies with no digest recorded: %v", err)
	}
	if err := v.Verify("sha256:another", recorded); !errors.Is(err, plan.ErrStale) {
		t.Errorf("a view of another plan: %v", err)
	}
	if err := p.Verify("sha256:another", ""); !errors.Is(err, plan.ErrStale) {
		t.Errorf("another plan: %v", err)
	}
}
