package chartverify_test

import (
	"context"
	"os"
	"testing"

	"helm.sh/helm/v4/pkg/chart/common"
	chartutil "helm.sh/helm/v4/pkg/chart/v2/util"

	"github.com/compositor-dev/compositor/chartfetch"
	"github.com/compositor-dev/compositor/chartverify"
	"github.com/compositor-dev/compositor/test/chartserver"
	"github.com/compositor-dev/compositor/test/samplecharts"
	"github.com/compositor-dev/compositor/test/signing"
)

// sampleArchive packages fireworks-app 1.1.5, with a file holding marker when marker
// is set: the same chart name and version, other bytes.
func sampleArchive(t *testing.T, marker string) []byte {
	t.Helper()
	ch, err := samplecharts.Load("1.1.5")
	if err != nil {
		t.Fatal(err)
	}
	if marker != "" {
		ch.Files = append(ch.Files, &common.File{Name: "attack.txt", Data: []byte(marker)})
	}
	path, err := chartutil.Save(ch, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestOCITagMovedBetweenFetchAndSignatures: the registry serves an unsigned
// manifest to the chart fetch, then moves the tag to a manifest the publisher did
// sign (same chart name and version, other archive) before the signatures are
// fetched; and someone who may push but not sign copies a genuine bundle of another
// manifest onto the unsigned one. VerifyOCI ties the signatures to the archive that was
// fetched (the signed manifest's chart layer must be it; the bundle must name the
// manifest), so both are refused as tampered.
func TestOCITagMovedBetweenFetchAndSignatures(t *testing.T) {
	ctx := context.Background()
	reg := chartserver.NewRegistry(t, chartserver.RegistryOptions{})
	key, err := signing.NewCosignKey()
	if err != nil {
		t.Fatal(err)
	}
	fetcher, err := chartfetch.New(chartfetch.Options{AllowNetworks: chartfetch.LoopbackNetworks()})
	if err != nil {
		t.Fatal(err)
	}
	policy := chartverify.CosignPolicy{PublicKey: key.PublicKeyPEM()}

	// The publisher's signed chart, at another path.
	signedURL := reg.MustPush(t, sampleArchive(t, ""), "signed")
	signedTarget := signing.CosignTargetOf(reg, signedURL, "1.1.5")
	signedDigest, err := signing.CosignSignChart(ctx, signedTarget, key)
	if err != nil {
		t.Fatal(err)
	}
	genuine, err := signing.CosignStatementBundle(key, signedDigest)
	if err != nil {
		t.Fatal(err)
	}

	t.Run("tag moved to a signed manifest after the fetch", func(t *testing.T) {
		chartURL := reg.MustPush(t, sampleArchive(t, "evil"), "moved")
		ref := chartfetch.Ref{URL: chartURL, Version: "1.1.5"}
		fetched, err := fetcher.Fetch(ctx, ref)
		if err != nil {
			t.Fatal(err)
		}
		reg.MustPush(t, sampleArchive(t, ""), "moved") // the tag now names the signed content
		if _, err := signing.CosignSignChart(ctx, signing.CosignTargetOf(reg, chartURL, "1.1.5"), key); err != nil {
			t.Fatal(err)
		}
		sigs, err := fetcher.FetchSignatures(ctx, ref, fetched)
		if err != nil {
			t.Fatal(err)
		}
		id, err := chartverify.VerifyOCI(fetched.Digest, sigs, policy)
		if chartverify.ReasonOf(err) != chartverify.ReasonTampered {
			t.Fatalf("the archive fetched before the tag moved was accepted or misjudged: %+v, %v", id, err)
		}
	})

	t.Run("a genuine bundle of another manifest copied as a referrer", func(t *testing.T) {
		chartURL := reg.MustPush(t, sampleArchive(t, "evil-2"), "copied")
		target := signing.CosignTargetOf(reg, chartURL, "1.1.5")
		if err := target.AttachBundle(ctx, genuine); err != nil {
			t.Fatal(err)
		}
		ref := chartfetch.Ref{URL: chartURL, Version: "1.1.5"}
		fetched, err := fetcher.Fetch(ctx, ref)
		if err != nil {
			t.Fatal(err)
		}
		sigs, err := fetcher.FetchSignatures(ctx, ref, fetched)
		if err != nil {
			t.Fatal(err)
		}
		if len(sigs.Bundles) != 1 {
			t.Fatalf("the copied bundle was not found: %d bundles", len(sigs.Bundles))
		}
		id, err := chartverify.VerifyOCI(fetched.Digest, sigs, policy)
		if chartverify.ReasonOf(err) != chartverify.ReasonTampered {
			t.Fatalf("a bundle of %s accepted for %s: %+v, %v", signedDigest, sigs.ManifestDigest, id, err)
		}
	})
}
