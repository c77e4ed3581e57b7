// Command node runs a single-node Kubernetes cluster on this machine until interrupted
// (`make cluster`), and cleans up after one (`make cluster-down`):
//
//	node up   -dir .compositor/cluster -k8s-bin bin/k8s -node-bin bin/node -image bin/images/pause.tar ...
//	node down -dir .compositor/cluster
//
// up starts etcd, kube-apiserver, kube-controller-manager, kube-scheduler, containerd
// (its own root, state and socket under -dir) and the kubelet, with a bridge CNI network
// on a bridge it creates; it imports the -image archives into containerd, writes an
// admin kubeconfig to -dir/kubeconfig and waits for the node to be Ready. On SIGINT or
// SIGTERM it stops every container and component and removes the mounts, network
// namespaces, bridge and cgroups the cluster made. down signals a running up and then
// does the same cleanup, so it also repairs after a runner that was killed.
//
// Networking stays on this machine: the API server and the kubelet listen on the
// bridge's address only (the admin kubeconfig reaches the API server through a forwarder
// on 127.0.0.1), pods get addresses on the bridge's subnet and no route beyond
// it and the service range, and nothing turns on IP forwarding or masquerading. One
// DNAT rule (iptables, for packets from the bridge) sends the API server's service
// address, which pods see as KUBERNETES_SERVICE_HOST, to the API server; there is no
// kube-proxy.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// config is what up and down share.
type config struct {
	dir         string // absolute; every path the cluster writes is under it
	k8sBin      string
	nodeBin     string
	cniBin      string
	runc        string
	images      []string
	nodeName    string
	bridge      string
	subnet      string // pods, on the bridge; its first address is the node's
	serviceCIDR string
	etcdPort    int
	apiPort     int
	reset       bool
}

type listFlag []string

func (l *listFlag) String() string     { return strings.Join(*l, ",") }
func (l *listFlag) Set(v string) error { *l = append(*l, v); return nil }

func main() {
	// Pdeathsig is tied to the thread that starts a child: keep the main goroutine on one.
	runtime.LockOSThread()
	if len(os.Args) < 2 || (os.Args[1] != "up" && os.Args[1] != "down") {
		fmt.Fprintln(os.Stderr, "usage: node up|down [flags]")
		os.Exit(2)
	}
	cfg := &config{}
	fs := flag.NewFlagSet(os.Args[1], flag.ExitOnError)
	fs.StringVar(&cfg.dir, "dir", filepath.Join(".compositor", "cluster"), "where the cluster keeps its state, logs and kubeconfig")
	fs.StringVar(&cfg.k8sBin, "k8s-bin", filepath.Join("bin", "k8s"), "directory with etcd, kube-apiserver, kube-controller-manager, kube-scheduler and kubelet")
	fs.StringVar(&cfg.nodeBin, "node-bin", filepath.Join("bin", "node"), "directory with containerd, containerd-shim-runc-v2 and ctr")
	fs.StringVar(&cfg.cniBin, "cni-bin", "/usr/lib/cni", "directory with the bridge, host-local and loopback CNI plugins")
	fs.StringVar(&cfg.runc, "runc", "runc", "the OCI runtime containerd's shim runs")
	fs.Var((*listFlag)(&cfg.images), "image", "OCI archive to import into containerd; repeatable")
	fs.StringVar(&cfg.nodeName, "node-name", "compositor-node", "name of the node")
	fs.StringVar(&cfg.bridge, "bridge", "cmp0", "bridge the pods are attached to")
	fs.StringVar(&cfg.subnet, "subnet", "10.217.0.0/24", "pod subnet on the bridge; the node has its first address")
	fs.StringVar(&cfg.serviceCIDR, "service-cidr", "10.217.128.0/24", "range of service cluster IPs")
	fs.IntVar(&cfg.etcdPort, "etcd-port", 12379, "etcd's client port on 127.0.0.1 (the peer port is one more)")
	fs.IntVar(&cfg.apiPort, "api-port", 6443, "kube-apiserver's port on the node address")
	fs.BoolVar(&cfg.reset, "reset", false, "up: start from an empty cluster (remove -dir first)")
	_ = fs.Parse(os.Args[2:])
	var err error
	for _, p := range []*string{&cfg.dir, &cfg.k8sBin, &cfg.nodeBin} {
		if *p, err = filepath.Abs(*p); err != nil {
			fatal(err)
		}
	}
	for i := range cfg.images {
		if cfg.images[i], err = filepath.Abs(cfg.images[i]); err != nil {
			fatal(err)
		}
	}
	if os.Geteuid() != 0 {
		fatal(errors.New("the cluster needs root (containers, mounts, network namespaces)"))
	}
	if os.Args[1] == "down" {
		err = down(cfg)
	} else {
		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
		defer stop()
		err = up(ctx, cfg)
	}
	if err != nil {
		fatal(err)
	}
}

func fatal(err error) {
	fmt.Fprintln(os.Stderr, "cluster:", err)
	os.Exit(1)
}

func logf(format string, args ...any) {
	fmt.Printf("cluster: "+format+"\n", args...)
}

func (c *config) pidFile() string { return filepath.Join(c.dir, "runner.pid") }

// runningPID is the pid of a live `node up` for this dir, or 0.
func (c *config) runningPID() int {
	data, err := os.ReadFile(c.pidFile())
	if err != nil {
		return 0
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(data)))
	if err != nil || pid <= 0 || pid == os.Getpid() {
		return 0
	}
	cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	if err != nil || !strings.Contains(string(cmdline), "up") {
		return 0
	}
	return pid
}

// down stops a running up (it cleans up after itself) and then removes whatever is left.
func down(cfg *config) error {
	if pid := cfg.runningPID(); pid > 0 {
		logf("stopping the cluster (runner pid %d)", pid)
		_ = syscall.Kill(pid, syscall.SIGTERM)
		deadline := time.Now().Add(2 * time.Minute)
		for time.Now().Before(deadline) && syscall.Kill(pid, 0) == nil {
			time.Sleep(200 * time.Millisecond)
		}
		if syscall.Kill(pid, 0) == nil {
			logf("runner pid %d did not stop in time; killing it", pid)
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	}
	cleanup(cfg)
	logf("down: no process, mount, network namespace, bridge or cgroup of the cluster is left")
	return nil
}
