//go:build node

// Package node is the e2e tier on a real node (`make test-node`): Compositor installed
// by its Helm chart into the single-node cluster of test/tools/node (`make cluster`),
// then the README's first definition, composition and upgrade, each step asserted.
//
// The tests start the cluster with a fresh state (-reset) and stop it at the end,
// unless one is already running from .compositor/cluster: then they use it if it is
// clean (no compositor-system or fireworksapp-system namespace) and leave what they
// installed. COMPOSITOR_NODE_KEEP=1 keeps a started cluster running, to look around.
//
// Every client talks to the API server through the kubeconfig's loopback forwarder;
// the only other address is the node's on the cluster's bridge, where the tests serve
// the sample charts to the pods, and they listen there only once the bridge has it.
//
// The build tag keeps `go test ./...` (make test) from running it: it needs root and
// the binaries `make cluster` builds.
package node

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

const (
	bridge     = "cmp0"
	nodeIP     = "10.217.0.1"
	podNetwork = "10.217.0.0/24"
)

// env is what every test shares: the checkout's paths and the cluster.
var env struct {
	root       string // repository root
	clusterDir string
	kubeconfig string
	k8sBin     string
	nodeBin    string
	reused     bool // a cluster was already running: use it if clean, leave it running
	keep       bool
	// seeded is set when TestSeedFlow passed in this run: the tests after it build on
	// its installation.
	seeded bool
	// closers run after every test: what outlives one test, like the chart server the
	// controllers keep fetching from.
	closers []func()
}

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	if os.Geteuid() != 0 {
		fmt.Fprintln(os.Stderr, "test/node needs root (it runs `make cluster`'s runner); skipping")
		return 0
	}
	wd, err := os.Getwd()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	env.root = filepath.Clean(filepath.Join(wd, "..", ".."))
	env.clusterDir = filepath.Join(env.root, ".compositor", "cluster")
	env.kubeconfig = filepath.Join(env.clusterDir, "kubeconfig")
	env.k8sBin = filepath.Join(env.root, "bin", "k8s")
	env.nodeBin = filepath.Join(env.root, "bin", "node")
	env.keep = os.Getenv("COMPOSITOR_NODE_KEEP") == "1"

	defer func() {
		for _, c := range env.closers {
			c()
		}
	}()
	if runnerRunning() {
		env.reused = true
		fmt.Println("node: using the cluster running from", env.clusterDir)
		return m.Run()
	}
	stop, err := startCluster()
	if err != nil {
		fmt.Fprintln(os.Stderr, "node: starting the cluster:", err)
		return 1
	}
	code := m.Run()
	if env.keep {
		fmt.Println("node: COMPOSITOR_NODE_KEEP=1: the cluster keeps running; `make cluster-down` stops it")
		return code
	}
	if err := stop(); err != nil {
		fmt.Fprintln(os.Stderr, "node: stopping the cluster:", err)
		if code == 0 {
			code = 1
		}
	}
	return code
}

// runnerRunning reports whether a `cluster up` is running for .compositor/cluster.
func runnerRunning() bool {
	data, err := os.ReadFile(filepath.Join(env.clusterDir, "runner.pid"))
	if err != nil {
		return false
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(data)))
	if err != nil || pid <= 0 {
		return false
	}
	cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	return err == nil && strings.Contains(string(cmdline), "up")
}

// startCluster runs the cluster's runner from a fresh state until it reports the node
// Ready; stop ends it (it removes everything the cluster made) and waits. The runner's
// output goes to .compositor/test-node-runner.log, not to a pipe, so that a cluster
// kept running (COMPOSITOR_NODE_KEEP=1) does not hold `go test`'s output open.
func startCluster() (stop func() error, err error) {
	images := filepath.Join(env.root, "bin", "images")
	logPath := filepath.Join(env.root, ".compositor", "test-node-runner.log")
	if err := os.MkdirAll(filepath.Dir(logPath), 0o755); err != nil {
		return nil, err
	}
	logFile, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	defer logFile.Close()
	cmd := exec.Command(filepath.Join(env.nodeBin, "cluster"), "up", "-reset",
		"-dir", env.clusterDir, "-k8s-bin", env.k8sBin, "-node-bin", env.nodeBin,
		"-image", filepath.Join(images, "pause.tar"), "-image", filepath.Join(images, "compositor.tar"))
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	started := time.Now()
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	fmt.Printf("node: starting the cluster (runner pid %d, log %s)\n", cmd.Process.Pid, logPath)
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	stop = func() error {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case err := <-exited:
			return err
		case <-time.After(3 * time.Minute):
			_ = cmd.Process.Kill()
			return errors.New("the runner did not stop within 3m; `make cluster-down` cleans up")
		}
	}
	deadline := time.After(5 * time.Minute)
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case err := <-exited:
			out, _ := os.ReadFile(logPath)
			return nil, fmt.Errorf("the runner exited: %v\n%s", err, out)
		case <-deadline:
			_ = stop()
			out, _ := os.ReadFile(logPath)
			return nil, fmt.Errorf("the node was not Ready within 5m\n%s", out)
		case <-tick.C:
		}
		if out, _ := os.ReadFile(logPath); strings.Contains(string(out), " is Ready after ") {
			fmt.Printf("node: cluster Ready after %s\n", time.Since(started).Round(100*time.Millisecond))
			return stop, nil
		}
	}
}

// command runs a client binary from bin/k8s with the cluster's loopback kubeconfig.
func command(t *testing.T, timeout time.Duration, stdin string, bin string, args ...string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(env.k8sBin, bin), args...)
	cmd.Dir = env.root
	cmd.Env = append(os.Environ(), "KUBECONFIG="+env.kubeconfig, "HELM_CACHE_HOME="+filepath.Join(t.TempDir(), "helm"))
	if stdin != "" {
		cmd.Stdin = strings.NewReader(stdin)
	}
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// kubectl runs kubectl and fails the test on error.
func kubectl(t *testing.T, args ...string) string {
	t.Helper()
	out, err := command(t, 4*time.Minute, "", "kubectl", args...)
	if err != nil {
		t.Fatalf("kubectl %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return out
}

// kubectlApply applies a manifest from stdin.
func kubectlApply(t *testing.T, manifest string) {
	t.Helper()
	if out, err := command(t, time.Minute, manifest, "kubectl", "apply", "-f", "-"); err != nil {
		t.Fatalf("kubectl apply: %v\n%s\n%s", err, out, manifest)
	}
}

func helm(t *testing.T, args ...string) string {
	t.Helper()
	out, err := command(t, 5*time.Minute, "", "helm", args...)
	if err != nil {
		t.Fatalf("helm %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return out
}

// eventually polls check every second until it returns nil or timeout passes.
func eventually(t *testing.T, what string, timeout time.Duration, check func() error) {
	t.Helper()
	started := time.Now()
	deadline := started.Add(timeout)
	for {
		err := check()
		if err == nil {
			t.Logf("%s after %s", what, time.Since(started).Round(100*time.Millisecond))
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %s: %v", what, timeout, err)
		}
		time.Sleep(time.Second)
	}
}

// serveSampleCharts serves the sample chart repository on the node's bridge address,
// the one address pods reach besides the API server, and returns its URL. It serves
// until every test has run: the definitions installed keep pointing at it. It refuses
// unless the bridge exists with that address: a listener cannot bind it otherwise,
// and no client here ever dials it.
func serveSampleCharts(t *testing.T, handler http.Handler) string {
	t.Helper()
	iface, err := net.InterfaceByName(bridge)
	if err != nil {
		t.Fatalf("the cluster's bridge %s: %v", bridge, err)
	}
	addrs, err := iface.Addrs()
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, a := range addrs {
		if ipn, ok := a.(*net.IPNet); ok && ipn.IP.String() == nodeIP {
			found = true
		}
	}
	if !found {
		t.Fatalf("bridge %s does not have %s (addresses %v)", bridge, nodeIP, addrs)
	}
	l, err := net.Listen("tcp", net.JoinHostPort(nodeIP, "0"))
	if err != nil {
		t.Fatal(err)
	}
	// HTTPS: Compositor fetches plain http:// from loopback only. The certificate is
	// httptest's, which the pods cannot verify (the definitions skip verification).
	srv := httptest.NewUnstartedServer(handler)
	_ = srv.Listener.Close()
	srv.Listener = l
	srv.StartTLS()
	env.closers = append(env.closers, srv.Close)
	return srv.URL
}
