package app

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/compositor-dev/compositor/test/samplecharts"
	"github.com/compositor-dev/compositor/test/signing"
)

// signedArchive packages fireworks-app 1.1.5 into a directory with its .prov signed by
// a new key, and writes that key's keyring and another key's beside it.
func signedArchive(t *testing.T) (archive, keyring, strangerKeyring string, key *signing.PGPKey) {
	t.Helper()
	dir := t.TempDir()
	require.NoError(t, samplecharts.Package(dir))
	archive = filepath.Join(dir, "fireworks-app-1.1.5.tgz")
	data, err := os.ReadFile(archive)
	require.NoError(t, err)
	key, err = signing.NewPGPKey("Chart Team", "charts@example.com", signing.PGPKeyOptions{})
	require.NoError(t, err)
	prov, err := key.SignProvenance(data)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(archive+".prov", prov, 0o644))
	stranger, err := signing.NewPGPKey("Someone Else", "else@example.com", signing.PGPKeyOptions{})
	require.NoError(t, err)
	keys := t.TempDir()
	keyring, strangerKeyring = filepath.Join(keys, "team.asc"), filepath.Join(keys, "stranger.asc")
	require.NoError(t, os.WriteFile(keyring, key.ArmoredPublicKeyring(), 0o644))
	require.NoError(t, os.WriteFile(strangerKeyring, stranger.ArmoredPublicKeyring(), 0o644))
	return archive, keyring, strangerKeyring, key
}

func TestLintChecksSignaturesOffline(t *testing.T) {
	archive, keyring, strangerKeyring, key := signedArchive(t)

	stdout, _, err := runCLI(t, "", "lint", archive, "--keyring", keyring)
	require.NoError(t, err, stdout)
	assert.Contains(t, stdout, "[INFO] fireworks-app-1.1.5.tgz: Provenance signature of sha256:")
	assert.Contains(t, stdout, "signer Chart Team <charts@example.com>, key "+key.Fingerprint())

	stdout, _, err = runCLI(t, "", "lint", archive, "--keyring", strangerKeyring)
	require.ErrorIs(t, err, ErrLint)
	assert.Contains(t, stdout, "[ERROR] fireworks-app-1.1.5.tgz: ChartSignedByUnknownKey: ")
	assert.Contains(t, stdout, "1 error(s), 0 warning(s)")

	// A .prov of other bytes.
	other := filepath.Join(t.TempDir(), "fireworks-app-1.1.5.tgz")
	require.NoError(t, os.WriteFile(other, mustRead(t, filepath.Join(filepath.Dir(archive), "fireworks-app-1.1.6.tgz")), 0o644))
	stdout, _, err = runCLI(t, "", "lint", other, "--prov", archive+".prov", "--keyring", keyring)
	require.ErrorIs(t, err, ErrLint)
	assert.Contains(t, stdout, "ChartTampered")

	// Unsigned, with a key to check it: an error; without a key, nothing to say.
	unsigned := filepath.Join(t.TempDir(), "fireworks-app-1.1.5.tgz")
	require.NoError(t, os.WriteFile(unsigned, mustRead(t, archive), 0o644))
	stdout, _, err = runCLI(t, "", "lint", unsigned, "--keyring", keyring)
	require.ErrorIs(t, err, ErrLint)
	assert.Contains(t, stdout, "ChartUnsigned")
	stdout, _, err = runCLI(t, "", "lint", unsigned)
	require.NoError(t, err)
	assert.NotContains(t, stdout, "signature")

	// A signature beside it and no key: a warning, not a pass.
	stdout, _, err = runCLI(t, "", "lint", archive)
	require.NoError(t, err)
	assert.Contains(t, stdout, "[WARNING] fireworks-app-1.1.5.tgz: a signature is given but no key to check it with")
}

func TestSignatureFlagMistakesAreUsageErrors(t *testing.T) {
	archive, keyring, _, _ := signedArchive(t)
	for name, args := range map[string][]string{
		"prov and bundle":           {"lint", archive, "--prov", archive + ".prov", "--bundle", archive + ".prov", "--keyring", keyring},
		"key for a prov":            {"lint", archive, "--key", keyring},
		"keyring for a bundle":      {"lint", archive, "--bundle", archive + ".prov", "--keyring", keyring},
		"keyless without root":      {"lint", archive, "--bundle", archive + ".prov", "--certificate-oidc-issuer", "https://i", "--certificate-identity", "me"},
		"identity and regexp":       {"lint", archive, "--bundle", archive + ".prov", "--certificate-oidc-issuer", "https://i", "--certificate-identity", "me", "--certificate-identity-regexp", "m.", "--trusted-root", keyring},
		"key and keyless":           {"lint", archive, "--bundle", archive + ".prov", "--key", keyring, "--trusted-root", keyring},
		"signature of a directory":  {"lint", sampleDir(t, "1.1.5"), "--keyring", keyring},
		"import without an archive": {"import"},
		"import prov and bundle":    {"import", archive, "--prov", archive + ".prov", "--bundle", archive + ".prov"},
	} {
		t.Run(name, func(t *testing.T) {
			_, _, err := runCLI(t, "", args...)
			require.Error(t, err)
			assert.Equal(t, ExitUsage, ExitCode(err), err.Error())
		})
	}
	_, _, err := runCLI(t, "", "lint", archive, "--keyring", filepath.Join(t.TempDir(), "missing.asc"))
	assert.ErrorContains(t, err, "--keyring: open ")
}

// An import whose signature does not check imports nothing, before any cluster is
// reached (there is none here).
func TestImportRefusesBeforeReachingTheCluster(t *testing.T) {
	archive, _, strangerKeyring, _ := signedArchive(t)
	_, _, err := runCLI(t, "", "import", archive, "--keyring", strangerKeyring, "--kubeconfig", filepath.Join(t.TempDir(), "none"))
	require.Error(t, err)
	assert.Contains(t, err.Error(), "not importing")
	assert.Contains(t, err.Error(), "ChartSignedByUnknownKey")

	garbage := filepath.Join(t.TempDir(), "chart.tgz")
	require.NoError(t, os.WriteFile(garbage, []byte("not a chart"), 0o644))
	_, _, err = runCLI(t, "", "import", garbage, "--kubeconfig", filepath.Join(t.TempDir(), "none"))
	assert.ErrorContains(t, err, "not a gzip stream")
}

func mustRead(t *testing.T, path string) []byte {
	t.Helper()
	data, err := os.ReadFile(path)
	require.NoError(t, err)
	return data
}
