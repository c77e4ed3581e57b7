package multicluster

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/compositor-dev/compositor/api/vocab"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

func TestNewRequiresNamespace(t *testing.T) {
	if _, err := New(&rest.Config{Host: "https://127.0.0.1:1"}, Options{}); err == nil {
		t.Fatal("New without a namespace succeeded")
	}
}

func TestKubeconfigsThatRunProgramsOrReadFilesAreRefused(t *testing.T) {
	const kubeconfig = `apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://127.0.0.1:6443", %s}}]
contexts: [{name: c, context: {cluster: c, user: u}}]
current-context: c
users: [{name: u, user: %s}, {name: spare, user: %s}]
`
	// clientcmd would read the files as it parses: they exist, and must not be read.
	dir := t.TempDir()
	token := filepath.Join(dir, "token")
	require.NoError(t, os.WriteFile(token, []byte("compositors-own"), 0o600))
	inline := `{token: abc}`
	for _, tc := range []struct{ cluster, user, spare, refusal string }{
		{cluster: "certificate-authority-data: Zm9v", user: inline, spare: inline},
		{cluster: "certificate-authority-data: Zm9v", user: `{client-certificate-data: Zm9v, client-key-data: YmFy}`, spare: inline},
		{cluster: "insecure-skip-tls-verify: true", user: `{exec: {apiVersion: client.authentication.k8s.io/v1, command: /bin/sh, args: [-c, "curl evil"], interactiveMode: Never}}`, spare: inline,
			refusal: "user u runs an exec credential plugin"},
		{cluster: "insecure-skip-tls-verify: true", user: `{tokenFile: ` + token + `}`, spare: inline, refusal: "user u reads its credentials from files"},
		{cluster: "insecure-skip-tls-verify: true", user: inline, spare: `{client-certificate: /etc/x.crt, client-key: /etc/x.key}`, refusal: "user spare reads its credentials from files"},
		{cluster: "insecure-skip-tls-verify: true", user: `{auth-provider: {name: oidc, config: {idp-issuer-url: "https://example.invalid"}}}`, spare: inline, refusal: "user u runs an auth-provider"},
		{cluster: "certificate-authority: /dev/zero", user: inline, spare: inline, refusal: "cluster c reads its certificate authority from a file"},
	} {
		data := []byte(fmt.Sprintf(kubeconfig, tc.cluster, tc.user, tc.spare))
		err := CheckRawKubeconfig(data)
		secret := &corev1.Secret{Data: map[string][]byte{SecretKey: data}}
		screened, terr := screenKubeconfig(secret)
		require.NoError(t, terr)
		got := screened.(*corev1.Secret)
		if tc.refusal == "" {
			assert.NoError(t, err, tc.user)
			assert.Equal(t, data, got.Data[SecretKey], "an accepted kubeconfig is cached as it is")
			assert.NotContains(t, got.Annotations, vocab.AnnotationKubeconfigRefused)
			cfg, err := clientcmd.RESTConfigFromKubeConfig(data)
			require.NoError(t, err)
			assert.NoError(t, CheckKubeconfig(cfg))
			continue
		}
		require.Error(t, err, tc.user)
		assert.Contains(t, err.Error(), "the kubeconfig is refused: "+tc.refusal+"; Compositor never runs a program or reads a file a kubeconfig names")
		assert.NotContains(t, err.Error(), "/bin/sh", "commands and paths stay out of what compositions show")
		assert.NotContains(t, err.Error(), dir)
		assert.Equal(t, refusedKubeconfig, got.Data[SecretKey], "a refused kubeconfig never reaches the provider")
		assert.Equal(t, err.Error(), got.Annotations[vocab.AnnotationKubeconfigRefused])
		cfg, perr := clientcmd.RESTConfigFromKubeConfig(got.Data[SecretKey])
		require.NoError(t, perr)
		assert.ErrorContains(t, CheckKubeconfig(cfg), "the kubeconfig is refused", "the provider builds no cluster from it")
	}
	assert.ErrorContains(t, CheckRawKubeconfig([]byte("{{{")), `key "kubeconfig" is not a kubeconfig`)
}

// CheckKubeconfig, the provider's last check, refuses plugins and files in the parsed
// form too.
func TestCheckKubeconfigRefusesParsedPluginsAndFiles(t *testing.T) {
	for _, cfg := range []*rest.Config{
		{Host: "https://127.0.0.1:1", ExecProvider: &clientcmdapi.ExecConfig{Command: "/bin/sh"}},
		{Host: "https://127.0.0.1:1", AuthProvider: &clientcmdapi.AuthProviderConfig{Name: "oidc"}},
		{Host: "https://127.0.0.1:1", BearerTokenFile: "/var/run/secrets/kubernetes.io/serviceaccount/token"},
		{Host: "https://127.0.0.1:1", TLSClientConfig: rest.TLSClientConfig{CAFile: "/etc/ssl/ca.pem"}},
	} {
		assert.ErrorContains(t, CheckKubeconfig(cfg), "the kubeconfig is refused: it would have Compositor use ")
	}
	assert.NoError(t, CheckKubeconfig(&rest.Config{Host: "https://127.0.0.1:1", BearerToken: "abc"}))
}

// FuzzCheckRawKubeconfig: whatever bytes a Secret holds, the screen does not panic,
// and a kubeconfig it lets through parses (when it parses) into a REST config that
// names no program and no file: nothing the screen passes makes clientcmd read a file
// or client-go run a program.
func FuzzCheckRawKubeconfig(f *testing.F) {
	f.Add([]byte(`apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://127.0.0.1:6443", certificate-authority-data: Zm9v}}]
contexts: [{name: c, context: {cluster: c, user: u}}]
current-context: c
users: [{name: u, user: {token: abc}}]
`))
	f.Add([]byte(`{"apiVersion":"v1","kind":"Config","clusters":[{"name":"c","cluster":{"server":"https://x","certificate-authority":"/etc/ca"}}],"users":[{"name":"u","user":{"exec":{"command":"sh","apiVersion":"client.authentication.k8s.io/v1"}}}],"contexts":[{"name":"c","context":{"cluster":"c","user":"u"}}],"current-context":"c"}`))
	f.Add([]byte("users: [{name: u, user: {tokenFile: /dev/zero}}]\ncurrent-context: c\ncontexts: [{name: c, context: {user: u, cluster: c}}]\nclusters: [{name: c, cluster: {server: https://x}}]\n"))
	f.Add([]byte("{{{"))
	f.Fuzz(func(t *testing.T, data []byte) {
		if CheckRawKubeconfig(data) != nil {
			return
		}
		cfg, err := clientcmd.RESTConfigFromKubeConfig(data)
		if err != nil {
			return
		}
		if err := CheckKubeconfig(cfg); err != nil {
			t.Fatalf("the screen let through a kubeconfig the provider's check refuses: %v\n%s", err, data)
		}
	})
}
