package app

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"

	"github.com/spf13/cobra"
	"helm.sh/helm/v4/pkg/chart/v2/loader"

	"github.com/compositor-dev/compositor/chartfetch"
	"github.com/compositor-dev/compositor/chartstore"
)

// ImportOptions configure `compositor import`.
type ImportOptions struct {
	Signature SignatureOptions
	// Namespace is Compositor's namespace, where imported charts are kept.
	Namespace string
	// Kubeconfig is the cluster ("" as kubectl finds it).
	Kubeconfig string
	// Replace replaces a chart of the same name and version imported with other
	// content.
	Replace bool
}

func newImportCommand() *cobra.Command {
	opts := &ImportOptions{Namespace: "compositor-system"}
	cmd := &cobra.Command{
		Use:   "import ARCHIVE [--prov FILE | --bundle FILE] [-n NAMESPACE]",
		Short: "Import a chart archive into the cluster, for clusters with no chart source",
		Long: `import keeps a packaged chart (.tgz) and the signature it came with in the cluster,
in a Secret of Compositor's namespace, so that a CompositionDefinition can name it with
no registry or repository reachable:

  spec:
    chart:
      url: imported://NAME
      version: VERSION

The archive is checked as a downloaded one is (size, entries, Chart.yaml). Its
signature, a Helm provenance file (--prov, or ARCHIVE.prov beside it) or a Sigstore
bundle of the archive (--bundle, from cosign sign-blob --bundle), is kept with it: a
definition whose spec.chart.verify asks for a check verifies it with its own keyring or
key, as it would a fetched chart, and refuses the chart when it does not check.

Given a key (--keyring for a .prov; --key, or keyless --certificate-oidc-issuer,
--certificate-identity and --trusted-root for a bundle), import checks the signature
first, offline, and imports nothing when it does not check.

A chart of the same name and version imported with other content is replaced only with
--replace; definitions that recorded the old content refuse the new one until a person
accepts its digest (compositor.dev/accept-chart-digest).`,
		Example: `  compositor import fireworks-app-1.1.5.tgz --keyring pubring.gpg
  compositor import fireworks-app-1.1.5.tgz --bundle fireworks-app-1.1.5.tgz.sigstore.json --key cosign.pub`,
		Args: func(_ *cobra.Command, args []string) error {
			if len(args) != 1 {
				return usageErrorf("import takes one argument, the chart archive (.tgz), got %d", len(args))
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			return RunImport(cmd.Context(), cmd.OutOrStdout(), opts, args[0])
		},
	}
	cmd.SetFlagErrorFunc(flagUsageError)
	fs := cmd.Flags()
	opts.Signature.AddFlags(fs)
	fs.StringVarP(&opts.Namespace, "namespace", "n", opts.Namespace, "Compositor's namespace, where imported charts are kept")
	fs.StringVar(&opts.Kubeconfig, "kubeconfig", opts.Kubeconfig, "Kubeconfig of the cluster (default as kubectl finds it)")
	fs.BoolVar(&opts.Replace, "replace", opts.Replace, "Replace a chart of the same name and version imported with other content")
	return cmd
}

// RunImport imports the chart archive at path into the cluster.
func RunImport(ctx context.Context, out io.Writer, opts *ImportOptions, path string) error {
	archive, im, err := readArchive(path)
	if err != nil {
		return err
	}
	if im.Provenance, im.Bundle, err = opts.Signature.material(path); err != nil {
		return err
	}
	switch {
	case opts.Signature.hasKeys():
		id, err := opts.Signature.verify(archive, im.Provenance, im.Bundle)
		if err != nil {
			return fmt.Errorf("not importing %s: %w", path, err)
		}
		fmt.Fprintln(out, describeIdentity(id))
	case len(im.Provenance) > 0 || len(im.Bundle) > 0:
		fmt.Fprintln(out, "The signature is kept with the chart, unchecked here (no key given): each definition that names the chart checks it as its spec.chart.verify says.")
	default:
		fmt.Fprintln(out, "Warning: the chart is imported unsigned; a definition whose spec.chart.verify asks for a check refuses it.")
	}
	c, _, err := clusterClient(opts.Kubeconfig)
	if err != nil {
		return err
	}
	store := &chartstore.Store{Client: c, Namespace: opts.Namespace}
	if err := store.Import(ctx, *im, opts.Replace); err != nil {
		return fmt.Errorf("importing %s: %w", path, err)
	}
	fmt.Fprintf(out, "Imported %s %s (%s) into Secret %s/%s. A CompositionDefinition names it with:\n  spec:\n    chart:\n      url: %s://%s\n      version: %s\n",
		im.Name, im.Version, im.Digest, opts.Namespace, chartstore.ImportedSecretName(im.Name, im.Version), chartstore.ImportedScheme, im.Name, im.Version)
	return nil
}

// readArchive reads a chart archive and checks it as a downloaded one is checked.
func readArchive(path string) ([]byte, *chartstore.Imported, error) {
	lim := chartfetch.DefaultLimits()
	f, err := os.Open(path)
	if err != nil {
		return nil, nil, err
	}
	defer f.Close()
	archive, err := io.ReadAll(io.LimitReader(f, lim.MaxArchiveBytes+1))
	if err != nil {
		return nil, nil, fmt.Errorf("reading %s: %w", path, err)
	}
	if err := chartfetch.CheckArchive(bytes.NewReader(archive), lim); err != nil {
		return nil, nil, fmt.Errorf("%s: %w", path, err)
	}
	ch, err := loader.LoadArchive(bytes.NewReader(archive))
	if err != nil {
		return nil, nil, fmt.Errorf("loading chart archive %s: %w", path, err)
	}
	sum := sha256.Sum256(archive)
	return archive, &chartstore.Imported{
		Name: ch.Name(), Version: ch.Metadata.Version, Digest: "sha256:" + hex.EncodeToString(sum[:]), Archive: archive,
	}, nil
}
