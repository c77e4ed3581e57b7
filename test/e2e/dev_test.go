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
func freePort(t testing.TB) string {
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

// devProcess is a running `compositor dev`.
type devProcess struct {
	cmd *exec.Cmd
	// exportLine is the `export KUBECONFIG=...` line it printed.
	exportLine string
	stderr     *strings.Builder
}

// startDev runs `compositor dev` with a kubeconfig in a temporary folder, no sample
// chart repository on a fixed port, and args, and waits for its KUBECONFIG line.
func startDev(t *testing.T, ctx context.Context, args ...string) *devProcess {
	t.Helper()
	kubeconfig := filepath.Join(t.TempDir(), "dev", "kubeconfig")
	args = append([]string{"dev", "--kubeconfig", kubeconfig, "--control-plane-dir", controlplane.BinDir(),
		"--chart-repository-addr", "127.0.0.1:0"}, args...)
	cmd := exec.CommandContext(ctx, buildCompositor(t), args...)
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	d := &devProcess{cmd: cmd, stderr: &strings.Builder{}}
	cmd.Stderr = d.stderr
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })

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
	select {
	case d.exportLine = <-exportLine:
	case <-ctx.Done():
		_ = cmd.Wait() // stderr is complete only once dev has ended
		t.Fatalf("dev printed no KUBECONFIG line; stderr:\n%s", d.stderr.String())
	}
	assert.Equal(t, "export KUBECONFIG="+kubeconfig, d.exportLine)
	return d
}

// kubectl runs kubectl against the dev control plane.
func (d *devProcess) kubectl(t *testing.T, ctx context.Context, args ...string) (string, error) {
	t.Helper()
	cmd := exec.CommandContext(ctx, filepath.Join(controlplane.BinDir(), "kubectl"), args...)
	cmd.Env = append(os.Environ(), strings.TrimPrefix(d.exportLine, "export "))
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// stop interrupts dev as Ctrl-C does and requires a clean exit.
func (d *devProcess) stop(t *testing.T) {
	t.Helper()
	require.NoError(t, d.cmd.Process.Signal(syscall.SIGINT))
	require.NoError(t, d.cmd.Wait(), "dev did not exit cleanly after SIGINT; stderr:\n%s", d.stderr.String())
}

func TestDevRunsUntilInterruptedAndLeavesNothingBehind(t *testing.T) {
	controlplane.Require(t, "etcd", "kube-apiserver", "kubectl")
	health := freePort(t)

	// A guard against a hang, not a timing assertion: the test fails rather than
	// waiting forever when dev never becomes ready.
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	dev := startDev(t, ctx, "--health-probe-bind-address", health, "--data-dir", t.TempDir())

	kubectl := func(args ...string) string {
		out, err := dev.kubectl(t, ctx, args...)
		require.NoError(t, err, "kubectl %s: %s", strings.Join(args, " "), out)
		return out
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

	kids := children(t, dev.cmd.Process.Pid)
	var names []string
	for _, pid := range kids {
		names = append(names, commandName(pid))
	}
	assert.ElementsMatch(t, []string{"etcd", "kube-apiserver"}, names)

	dev.stop(t)
	for _, pid := range kids {
		assert.False(t, alive(pid), "%s (pid %d) still runs after dev stopped", commandName(pid), pid)
	}
}

func TestDevKeepsItsDataUnlessReset(t *testing.T) {
	controlplane.Require(t, "etcd", "kube-apiserver", "kubectl")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	data := t.TempDir()
	health := "--health-probe-bind-address=0"

	dev := startDev(t, ctx, health, "--data-dir", data)
	out, err := dev.kubectl(t, ctx, "create", "namespace", "kept")
	require.NoError(t, err, out)
	dev.stop(t)

	dev = startDev(t, ctx, health, "--data-dir", data)
	out, err = dev.kubectl(t, ctx, "get", "namespace", "kept", "-o", "name")
	require.NoError(t, err, "a restart with the same data dir keeps the namespace: %s", out)
	assert.Equal(t, "namespace/kept\n", out)
	dev.stop(t)

	dev = startDev(t, ctx, health, "--data-dir", data, "--reset")
	out, err = dev.kubectl(t, ctx, "get", "namespace", "kept")
	require.Error(t, err, "--reset starts empty")
	assert.Contains(t, out, `namespaces "kept" not found`)
	dev.stop(t)
}

func TestDevWithoutControlPlaneNamesTheFix(t *testing.T) {
	bin := buildCompositor(t)
	cmd := exec.Command(bin, "dev", "--control-plane-dir", t.TempDir(), "--kubeconfig", filepath.Join(t.TempDir(), "kc"))
	out, err := cmd.CombinedOutput()
	require.Error(t, err)
	assert.Contains(t, string(out), "make control-plane")
	assert.Contains(t, string(out), "missing etcd, kube-apiserver")
}
