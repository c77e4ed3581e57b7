package e2e

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/compositor-dev/compositor/test/controlplane"
)

// buildCompositor builds the compositor binary once per test run.
func buildCompositor(t *testing.T) string {
	t.Helper()
	bin, err := compositorBinary()
	require.NoError(t, err)
	return bin
}

// buildDir holds the binary built for this run; TestMain removes it.
var buildDir string

var compositorBinary = sync.OnceValues(func() (string, error) {
	var err error
	if buildDir, err = os.MkdirTemp("", "compositor-e2e-"); err != nil {
		return "", err
	}
	bin := filepath.Join(buildDir, "compositor")
	cmd := exec.Command("go", "build", "-o", bin, "./cmd/compositor")
	cmd.Dir = controlplane.RepoRoot()
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build ./cmd/compositor: %w\n%s", err, out)
	}
	return bin, nil
})

// freePort returns a loopback address no one listens on right now.
func freePort(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := l.Addr().String()
	require.NoError(t, l.Close())
	return addr
}

// children lists the PIDs whose parent is pid.
func children(t *testing.T, pid int) []int {
	t.Helper()
	stats, err := filepath.Glob("/proc/[0-9]*/stat")
	require.NoError(t, err)
	var kids []int
	for _, path := range stats {
		data, err := os.ReadFile(path)
		if err != nil {
			continue // the process ended while we looked
		}
		// The fields after the command name, which is in parentheses and may hold spaces:
		// state, ppid, ...
		fields := strings.Fields(string(data[strings.LastIndexByte(string(data), ')')+1:]))
		if len(fields) > 1 && fields[1] == strconv.Itoa(pid) {
			child, _ := strconv.Atoi(filepath.Base(filepath.Dir(path)))
			kids = append(kids, child)
		}
	}
	return kids
}

// alive reports whether pid is a running (not zombie) process.
func alive(pid int) bool {
	data, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return false
	}
	fields := strings.Fields(string(data[strings.LastIndexByte(string(data), ')')+1:]))
	return len(fields) > 0 && fields[0] != "Z"
}

func commandName(pid int) string {
	data, _ := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "comm"))
	return strings.TrimSpace(string(data))
}

func TestDevRunsUntilInterruptedAndLeavesNothingBehind(t *testing.T) {
	controlplane.Require(t, "etcd", "kube-apiserver", "kubectl")
	bin := buildCompositor(t)
	kubeconfig := filepath.Join(t.TempDir(), "dev", "kubeconfig")
	health := freePort(t)

	// A guard against a hang, not a timing assertion: the test fails rather than
	// waiting forever when dev never becomes ready.
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	dev := exec.CommandContext(ctx, bin, "dev",
		"--kubeconfig", kubeconfig,
		"--control-plane-dir", controlplane.BinDir(),
		"--health-probe-bind-address", health)
	stdout, err := dev.StdoutPipe()
	require.NoError(t, err)
	var stderr strings.Builder
	dev.Stderr = &stderr
	require.NoError(t, dev.Start())
	defer func() { _ = dev.Process.Kill() }()

	exportLine := make(chan string, 1)
	go func() {
		scanner := bufio.NewScanner(stdout)
		for scanner.Scan() {
			if line := scanner.Text(); strings.HasPrefix(line, "export KUBECONFIG=") {
				exportLine <- line
			}
		}
		_, _ = io.Copy(io.Discard, stdout)
	}()

	var line string
	select {
	case line = <-exportLine:
	case <-ctx.Done():
		_ = dev.Wait() // stderr is complete only once dev has ended
		t.Fatalf("dev printed no KUBECONFIG line; stderr:\n%s", stderr.String())
	}
	assert.Equal(t, "export KUBECONFIG="+kubeconfig, line)

	kubectl := func(args ...string) string {
		cmd := exec.CommandContext(ctx, filepath.Join(controlplane.BinDir(), "kubectl"), args...)
		cmd.Env = append(os.Environ(), strings.TrimPrefix(line, "export "))
		out, err := cmd.CombinedOutput()
		require.NoError(t, err, "kubectl %s: %s", strings.Join(args, " "), out)
		return string(out)
	}
	out := kubectl("get", "crd", "-o", "name")
	assert.Contains(t, out, "compositiondefinitions.core.krateo.io")
	assert.Contains(t, out, "compositionpolicies.policy.compositor.dev")

	// The webhooks are installed: a composition gets its defaults.
	kubectl("apply", "-f", fixture("demoapps-crd.yaml"))
	kubectl("wait", "--for", "condition=Established", "crd/demoapps.composition.krateo.io")
	kubectl("apply", "-f", fixture("demoapp.yaml"))
	out = kubectl("get", "demoapp", "demo", "-o", `jsonpath={.metadata.annotations.krateo\.io/release-name} {.metadata.annotations.krateo\.io/paused} {.metadata.labels.krateo\.io/composition-version}`)
	assert.Equal(t, "demo false v1-1-5", out)

	require.EventuallyWithT(t, func(c *assert.CollectT) {
		resp, err := http.Get("http://" + health + "/readyz")
		if !assert.NoError(c, err) {
			return
		}
		_ = resp.Body.Close()
		assert.Equal(c, http.StatusOK, resp.StatusCode)
	}, time.Minute, 200*time.Millisecond)

	kids := children(t, dev.Process.Pid)
	var names []string
	for _, pid := range kids {
		names = append(names, commandName(pid))
	}
	assert.ElementsMatch(t, []string{"etcd", "kube-apiserver"}, names)

	require.NoError(t, dev.Process.Signal(syscall.SIGINT))
	err = dev.Wait()
	require.NoError(t, err, "dev did not exit cleanly after SIGINT; stderr:\n%s", stderr.String())
	for _, pid := range kids {
		assert.False(t, alive(pid), "%s (pid %d) still runs after dev stopped", commandName(pid), pid)
	}
}

func TestDevWithoutControlPlaneNamesTheFix(t *testing.T) {
	bin := buildCompositor(t)
	cmd := exec.Command(bin, "dev", "--control-plane-dir", t.TempDir(), "--kubeconfig", filepath.Join(t.TempDir(), "kc"))
	out, err := cmd.CombinedOutput()
	require.Error(t, err)
	assert.Contains(t, string(out), "make control-plane")
	assert.Contains(t, string(out), "missing etcd, kube-apiserver")
}
