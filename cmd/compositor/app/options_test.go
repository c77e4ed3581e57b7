package app

import (
	"io"
	"testing"
	"time"

	"github.com/spf13/pflag"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// parse registers the serve flags, parses args and applies env as `compositor serve`
// does.
func parse(t *testing.T, args []string, env map[string]string) (*ServeOptions, error) {
	t.Helper()
	opts := NewServeOptions()
	fs := pflag.NewFlagSet("serve", pflag.ContinueOnError)
	opts.AddFlags(fs)
	require.NoError(t, fs.Parse(args))
	lookup := func(name string) (string, bool) {
		v, ok := env[name]
		return v, ok
	}
	if err := applyEnv(fs, lookup); err != nil {
		return opts, err
	}
	return opts, opts.Validate()
}

func TestServeOptionsDefaults(t *testing.T) {
	opts, err := parse(t, nil, nil)
	require.NoError(t, err)
	assert.Equal(t, time.Hour, opts.Sync)
	assert.Equal(t, 5*time.Minute, opts.Poll)
	assert.Equal(t, 3, opts.MaxReconcileRate)
	assert.False(t, opts.Debug)
	assert.False(t, opts.LeaderElection)
	assert.Empty(t, opts.RegistryConfigPath)
	assert.Equal(t, ":8081", opts.HealthProbeAddr)
	assert.Equal(t, ":8080", opts.MetricsAddr)
	assert.Equal(t, CertsBuiltin, opts.Certs)
	assert.Equal(t, 5*time.Second, opts.WebhookTimeout)
	assert.Equal(t, "compositor-system", opts.Namespace)
}

func TestServeOptionsFromEnvironment(t *testing.T) {
	opts, err := parse(t, nil, map[string]string{
		"CORE_PROVIDER_DEBUG":              "true",
		"CORE_PROVIDER_SYNC":               "30m",
		"CORE_PROVIDER_POLL_INTERVAL":      "90s",
		"CORE_PROVIDER_MAX_RECONCILE_RATE": "7",
		"CORE_PROVIDER_LEADER_ELECTION":    "true",
		"HELM_REGISTRY_CONFIG_PATH":        "/etc/helm/registry.json",
		"POD_NAME":                         "compositor-7d9f-abcde",
	})
	require.NoError(t, err)
	assert.Equal(t, "compositor-7d9f-abcde", opts.ReplicaID)
	assert.True(t, opts.Debug)
	assert.Equal(t, 30*time.Minute, opts.Sync)
	assert.Equal(t, 90*time.Second, opts.Poll)
	assert.Equal(t, 7, opts.MaxReconcileRate)
	assert.True(t, opts.LeaderElection)
	assert.Equal(t, "/etc/helm/registry.json", opts.RegistryConfigPath)
}

func TestServeFlagsWinOverEnvironment(t *testing.T) {
	opts, err := parse(t,
		[]string{"-d=false", "-s", "10m", "--poll=1m", "--max-reconcile-rate", "1", "-l=false", "--helm-registry-config-path", "/flag.json"},
		map[string]string{
			"CORE_PROVIDER_DEBUG":              "true",
			"CORE_PROVIDER_SYNC":               "30m",
			"CORE_PROVIDER_POLL_INTERVAL":      "90s",
			"CORE_PROVIDER_MAX_RECONCILE_RATE": "7",
			"CORE_PROVIDER_LEADER_ELECTION":    "true",
			"HELM_REGISTRY_CONFIG_PATH":        "/env.json",
		})
	require.NoError(t, err)
	assert.False(t, opts.Debug)
	assert.Equal(t, 10*time.Minute, opts.Sync)
	assert.Equal(t, time.Minute, opts.Poll)
	assert.Equal(t, 1, opts.MaxReconcileRate)
	assert.False(t, opts.LeaderElection)
	assert.Equal(t, "/flag.json", opts.RegistryConfigPath)
}

func TestServeOptionsRejectBadValues(t *testing.T) {
	for _, tc := range []struct {
		name    string
		args    []string
		env     map[string]string
		wantErr []string
	}{
		{
			name:    "unparsable environment names the variable",
			env:     map[string]string{"CORE_PROVIDER_SYNC": "hourly", "CORE_PROVIDER_LEADER_ELECTION": "maybe"},
			wantErr: []string{`CORE_PROVIDER_SYNC="hourly"`, `CORE_PROVIDER_LEADER_ELECTION="maybe"`},
		},
		{
			name:    "out of range values name the flag",
			args:    []string{"--sync=0s", "--max-reconcile-rate=0"},
			wantErr: []string{"--sync must be positive", "--max-reconcile-rate must be at least 1"},
		},
		{
			name:    "unknown certificate mode and timeouts the API server refuses",
			args:    []string{"--certs=vault", "--webhook-timeout=45s"},
			wantErr: []string{`--certs must be builtin or cert-manager, got "vault"`, "--webhook-timeout must be between 1s and 30s"},
		},
		{
			name:    "multicluster needs the controllers in process",
			args:    []string{"--multicluster"},
			wantErr: []string{"--multicluster needs --controllers in-process: the generated Deployments install in their own cluster only"},
		},
		{
			name:    "replicas sharing clusters need a name and a lease that can be renewed",
			args:    []string{"--multicluster", "--controllers=in-process", "-l", "--replica-id=", "--shard-lease-duration=1s"},
			wantErr: []string{"--replica-id must not be empty with --leader-election and --multicluster", "--shard-lease-duration must be at least 4s, got 1s"},
		},
		{
			name:    "out of range environment is validated too",
			env:     map[string]string{"CORE_PROVIDER_POLL_INTERVAL": "-5m"},
			wantErr: []string{"--poll must be positive"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := parse(t, tc.args, tc.env)
			require.Error(t, err)
			for _, want := range tc.wantErr {
				assert.Contains(t, err.Error(), want)
			}
		})
	}
}

func TestCheckControlPlaneNamesTheFix(t *testing.T) {
	err := checkControlPlane(t.TempDir())
	require.ErrorIs(t, err, ErrControlPlaneMissing)
	assert.Contains(t, err.Error(), "make control-plane")
	assert.Contains(t, err.Error(), "etcd, kube-apiserver")
}

// Issue 27: an explicit flag wins over a default of dev's mode. dev delivers to target
// clusters by default, which needs the controllers in process: --controllers
// deployments alone turns that off (dev then fails only for the missing control
// plane), and both given explicitly still conflict.
func TestDevExplicitControllersWinOverItsMulticlusterDefault(t *testing.T) {
	run := func(args ...string) error {
		cmd := newDevCommand()
		cmd.SetArgs(append(args, "--control-plane-dir", t.TempDir()))
		cmd.SetOut(io.Discard)
		cmd.SetErr(io.Discard)
		return cmd.Execute()
	}
	err := run("--controllers", "deployments")
	require.ErrorIs(t, err, ErrControlPlaneMissing, "the options are valid")

	err = run("--controllers", "deployments", "--multicluster=true")
	require.Error(t, err)
	assert.Contains(t, err.Error(), "--multicluster needs --controllers in-process")
}
