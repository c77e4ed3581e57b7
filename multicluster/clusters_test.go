package multicluster

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

func TestNewRequiresNamespace(t *testing.T) {
	if _, err := New(&rest.Config{Host: "https://127.0.0.1:1"}, Options{}); err == nil {
		t.Fatal("New without a namespace succeeded")
	}
}

func TestCheckKubeconfigRefusesPluginsAndFiles(t *testing.T) {
	const server = `apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://127.0.0.1:6443", certificate-authority-data: Zm9v}}]
contexts: [{name: c, context: {cluster: c, user: u}}]
current-context: c
users: [{name: u, user: %s}]
`
	// clientcmd reads the files a kubeconfig names as it parses it: they must exist.
	dir := t.TempDir()
	token, crt, key := filepath.Join(dir, "token"), filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
	for _, path := range []string{token, crt, key} {
		require.NoError(t, os.WriteFile(path, []byte("compositors-own"), 0o600))
	}
	for user, refusal := range map[string]string{
		`{token: abc}`: "",
		`{client-certificate-data: Zm9v, client-key-data: YmFy}`:                                                                   "",
		`{exec: {apiVersion: client.authentication.k8s.io/v1, command: /bin/sh, args: [-c, "curl evil"], interactiveMode: Never}}`: "an exec credential plugin (/bin/sh)",
		`{tokenFile: ` + token + `}`:                                                         "a file of Compositor's (tokenFile " + token + ")",
		`{client-certificate: ` + crt + `, client-key: ` + key + `}`:                         "a file of Compositor's (client-certificate " + crt + "), a file of Compositor's (client-key " + key + ")",
		`{auth-provider: {name: oidc, config: {idp-issuer-url: "https://example.invalid"}}}`: "an auth-provider (oidc)",
	} {
		cfg, err := clientcmd.RESTConfigFromKubeConfig([]byte(fmt.Sprintf(server, user)))
		require.NoError(t, err, user)
		err = CheckKubeconfig(cfg)
		if refusal == "" {
			assert.NoError(t, err, user)
			continue
		}
		require.Error(t, err, user)
		assert.Contains(t, err.Error(), "the kubeconfig would have Compositor use "+refusal+": put the credentials in the kubeconfig itself")
	}
	cfg, err := clientcmd.RESTConfigFromKubeConfig([]byte(strings.Replace(fmt.Sprintf(server, `{token: abc}`), "certificate-authority-data: Zm9v", "certificate-authority: "+crt, 1)))
	require.NoError(t, err)
	assert.ErrorContains(t, CheckKubeconfig(cfg), "certificate-authority "+crt)
}
