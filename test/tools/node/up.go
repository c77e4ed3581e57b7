package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// proc is one component the runner started.
type proc struct {
	name string
	cmd  *exec.Cmd
	done chan struct{}
	err  error
}

type cluster struct {
	cfg     *config
	nodeIP  string
	apiURL  string
	pki     *pki
	procs   []*proc
	exited  chan *proc
	closers []io.Closer
	dataDir string
}

func (c *cluster) path(elem ...string) string {
	return filepath.Join(append([]string{c.cfg.dir}, elem...)...)
}

func up(ctx context.Context, cfg *config) error {
	if pid := cfg.runningPID(); pid > 0 {
		return fmt.Errorf("a cluster is already running from %s (runner pid %d); `make cluster-down` stops it", cfg.dir, pid)
	}
	prefix, err := netip.ParsePrefix(cfg.subnet)
	if err != nil {
		return fmt.Errorf("-subnet: %w", err)
	}
	for _, bin := range []string{
		filepath.Join(cfg.k8sBin, "etcd"), filepath.Join(cfg.k8sBin, "kube-apiserver"),
		filepath.Join(cfg.k8sBin, "kube-controller-manager"), filepath.Join(cfg.k8sBin, "kube-scheduler"),
		filepath.Join(cfg.k8sBin, "kubelet"), filepath.Join(cfg.nodeBin, "containerd"),
		filepath.Join(cfg.nodeBin, "containerd-shim-runc-v2"), filepath.Join(cfg.nodeBin, "ctr"),
		filepath.Join(cfg.cniBin, "bridge"), filepath.Join(cfg.cniBin, "host-local"), filepath.Join(cfg.cniBin, "loopback"),
	} {
		if _, err := os.Stat(bin); err != nil {
			return fmt.Errorf("missing %s: `make cluster` builds or installs it", bin)
		}
	}
	if _, err := exec.LookPath("iptables"); err != nil {
		return fmt.Errorf("iptables not found (Debian's iptables): pods reach the API server through one DNAT rule: %w", err)
	}
	runc, err := exec.LookPath(cfg.runc)
	if err != nil {
		return fmt.Errorf("%s not found (`make cluster` installs Debian's runc): %w", cfg.runc, err)
	}
	if cfg.runc, err = filepath.Abs(runc); err != nil {
		return err
	}
	// Whatever a previous runner left (it may have been killed) goes first.
	cleanup(cfg)
	if cfg.reset {
		if err := os.RemoveAll(cfg.dir); err != nil {
			return err
		}
	}
	if err := os.MkdirAll(filepath.Join(cfg.dir, "logs"), 0o755); err != nil {
		return err
	}
	if err := os.WriteFile(cfg.pidFile(), []byte(strconv.Itoa(os.Getpid())+"\n"), 0o644); err != nil {
		return err
	}
	c := &cluster{
		cfg:    cfg,
		nodeIP: prefix.Addr().Next().String(),
		exited: make(chan *proc, 16),
	}
	c.apiURL = "https://" + net.JoinHostPort(c.nodeIP, strconv.Itoa(cfg.apiPort))
	started := time.Now()
	err = c.start(ctx)
	if err == nil {
		logf("node %s is Ready after %s", cfg.nodeName, time.Since(started).Round(100*time.Millisecond))
		fmt.Printf("\nexport KUBECONFIG=%s\nkubectl get nodes\n\nCtrl-C or `make cluster-down` stops the cluster.\n\n", c.path("kubeconfig"))
		select {
		case <-ctx.Done():
			logf("stopping")
		case p := <-c.exited:
			err = fmt.Errorf("%s exited: %v (see %s)", p.name, p.err, c.path("logs", p.name+".log"))
		}
	}
	c.stop()
	cleanup(cfg)
	_ = os.Remove(cfg.pidFile())
	if err != nil && ctx.Err() != nil {
		return nil
	}
	return err
}

func (c *cluster) start(ctx context.Context) error {
	cfg := c.cfg
	if err := c.setupBridge(); err != nil {
		return err
	}
	if err := c.setupPKI(); err != nil {
		return err
	}
	if err := c.setupServiceNAT(); err != nil {
		return err
	}
	// etcd
	etcdURL := fmt.Sprintf("http://127.0.0.1:%d", cfg.etcdPort)
	if err := c.run("etcd", filepath.Join(cfg.k8sBin, "etcd"), nil,
		"--name=compositor-cluster", "--data-dir="+c.path("etcd"),
		"--listen-client-urls="+etcdURL, "--advertise-client-urls="+etcdURL,
		fmt.Sprintf("--listen-peer-urls=http://127.0.0.1:%d", cfg.etcdPort+1),
		fmt.Sprintf("--initial-advertise-peer-urls=http://127.0.0.1:%d", cfg.etcdPort+1),
		fmt.Sprintf("--initial-cluster=compositor-cluster=http://127.0.0.1:%d", cfg.etcdPort+1),
		"--listen-metrics-urls=", "--unsafe-no-fsync",
	); err != nil {
		return err
	}
	if err := c.wait(ctx, "etcd", time.Minute, func() error { return httpOK(http.DefaultClient, etcdURL+"/health") }); err != nil {
		return err
	}
	// kube-apiserver
	pki := c.pki.path
	if err := c.run("kube-apiserver", filepath.Join(cfg.k8sBin, "kube-apiserver"), nil,
		"--etcd-servers="+etcdURL,
		"--bind-address="+c.nodeIP, "--advertise-address="+c.nodeIP, "--secure-port="+strconv.Itoa(cfg.apiPort),
		"--service-cluster-ip-range="+cfg.serviceCIDR,
		"--client-ca-file="+pki("ca.crt"), "--tls-cert-file="+pki("apiserver.crt"), "--tls-private-key-file="+pki("apiserver.key"),
		"--kubelet-client-certificate="+pki("apiserver-kubelet-client.crt"), "--kubelet-client-key="+pki("apiserver-kubelet-client.key"),
		"--kubelet-preferred-address-types=InternalIP",
		"--service-account-issuer=https://kubernetes.default.svc.cluster.local",
		"--service-account-key-file="+pki("sa.pub"), "--service-account-signing-key-file="+pki("sa.key"),
		"--authorization-mode=Node,RBAC", "--enable-admission-plugins=NodeRestriction",
		"--allow-privileged=true", "--profiling=false",
		// Webhook and aggregated API services resolve to their endpoints' pod
		// addresses, which the API server reaches over the bridge without kube-proxy.
		"--enable-aggregator-routing=true",
	); err != nil {
		return err
	}
	admin, err := c.adminClient()
	if err != nil {
		return err
	}
	if err := c.wait(ctx, "kube-apiserver", 2*time.Minute, func() error { return httpOK(admin, c.apiURL+"/readyz") }); err != nil {
		return err
	}
	proxy, err := proxyLoopback(net.JoinHostPort("127.0.0.1", strconv.Itoa(cfg.apiPort)), strings.TrimPrefix(c.apiURL, "https://"))
	if err != nil {
		return fmt.Errorf("forwarding loopback to the API server: %w", err)
	}
	c.closers = append(c.closers, proxy)
	// kube-controller-manager and kube-scheduler
	kcm := c.path("kubeconfigs", "kube-controller-manager")
	if err := c.run("kube-controller-manager", filepath.Join(cfg.k8sBin, "kube-controller-manager"), nil,
		"--kubeconfig="+kcm, "--authentication-kubeconfig="+kcm, "--authorization-kubeconfig="+kcm,
		"--bind-address=127.0.0.1", "--secure-port=10257", "--leader-elect=false",
		"--use-service-account-credentials=true",
		"--service-account-private-key-file="+pki("sa.key"), "--root-ca-file="+pki("ca.crt"),
		"--cluster-signing-cert-file="+pki("ca.crt"), "--cluster-signing-key-file="+pki("ca.key"),
		"--service-cluster-ip-range="+cfg.serviceCIDR, "--allocate-node-cidrs=false",
		"--controllers=*,-cloud-node-lifecycle,-service-lb-controller,-node-route-controller",
	); err != nil {
		return err
	}
	sched := c.path("kubeconfigs", "kube-scheduler")
	if err := c.run("kube-scheduler", filepath.Join(cfg.k8sBin, "kube-scheduler"), nil,
		"--kubeconfig="+sched, "--authentication-kubeconfig="+sched, "--authorization-kubeconfig="+sched,
		"--bind-address=127.0.0.1", "--secure-port=10259", "--leader-elect=false",
	); err != nil {
		return err
	}
	// containerd
	if err := c.writeContainerdConfig(); err != nil {
		return err
	}
	sock := c.path("containerd", "containerd.sock")
	env := []string{"PATH=" + cfg.nodeBin + ":/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}
	if err := c.run("containerd", filepath.Join(cfg.nodeBin, "containerd"), env,
		"--config="+c.path("containerd", "config.toml")); err != nil {
		return err
	}
	if err := c.wait(ctx, "containerd", time.Minute, func() error {
		return exec.Command(filepath.Join(cfg.nodeBin, "ctr"), "--address="+sock, "version").Run()
	}); err != nil {
		return err
	}
	for _, img := range cfg.images {
		started := time.Now()
		out, err := exec.Command(filepath.Join(cfg.nodeBin, "ctr"), "--address="+sock, "--namespace=k8s.io",
			"images", "import", "--snapshotter=overlayfs", img).CombinedOutput()
		if err != nil {
			return fmt.Errorf("importing %s: %v: %s", img, err, out)
		}
		logf("imported %s in %s", filepath.Base(img), time.Since(started).Round(10*time.Millisecond))
	}
	// kubelet
	if err := c.writeKubeletConfig(sock); err != nil {
		return err
	}
	if err := c.run("kubelet", filepath.Join(cfg.k8sBin, "kubelet"), nil,
		"--config="+c.path("kubelet", "config.yaml"),
		"--kubeconfig="+c.path("kubeconfigs", "kubelet"),
		"--root-dir="+c.path("kubelet", "root"), "--cert-dir="+c.path("kubelet", "pki"),
		"--hostname-override="+cfg.nodeName, "--node-ip="+c.nodeIP,
	); err != nil {
		return err
	}
	return c.wait(ctx, "node "+cfg.nodeName+" Ready", 3*time.Minute, func() error { return c.nodeReady(admin) })
}

// setupBridge creates the pods' bridge with the node's address on it. The bridge has
// no uplink: traffic on it stays between the pods and this host.
func (c *cluster) setupBridge() error {
	prefix, _ := netip.ParsePrefix(c.cfg.subnet)
	for _, args := range [][]string{
		{"link", "add", c.cfg.bridge, "type", "bridge"},
		{"addr", "add", c.nodeIP + "/" + strconv.Itoa(prefix.Bits()), "dev", c.cfg.bridge},
		{"link", "set", c.cfg.bridge, "up"},
	} {
		if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
			return fmt.Errorf("ip %s: %v: %s", strings.Join(args, " "), err, out)
		}
	}
	// The node's address is on a bridge without ports; wait until the kernel lets
	// servers bind it.
	deadline := time.Now().Add(10 * time.Second)
	for {
		l, err := net.Listen("tcp", net.JoinHostPort(c.nodeIP, "0"))
		if err == nil {
			l.Close()
			return nil
		}
		if time.Now().After(deadline) {
			return err
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func (c *cluster) setupPKI() error {
	p, err := loadPKI(c.path("pki"))
	if err != nil {
		return err
	}
	c.pki = p
	_, svcNet, err := net.ParseCIDR(c.cfg.serviceCIDR)
	if err != nil {
		return fmt.Errorf("-service-cidr: %w", err)
	}
	svcIP := append(net.IP(nil), svcNet.IP.To4()...)
	svcIP[3]++
	node := net.ParseIP(c.nodeIP)
	for _, s := range []struct {
		name, cn string
		orgs     []string
		server   bool
		ips      []net.IP
		dns      []string
	}{
		{"apiserver", "kube-apiserver", nil, true, []net.IP{node, svcIP, net.IPv4(127, 0, 0, 1)},
			[]string{"localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc", "kubernetes.default.svc.cluster.local"}},
		{"apiserver-kubelet-client", "kube-apiserver-kubelet-client", []string{"system:masters"}, false, nil, nil},
		{"admin", "compositor-admin", []string{"system:masters"}, false, nil, nil},
		{"kube-controller-manager", "system:kube-controller-manager", nil, false, nil, nil},
		{"kube-scheduler", "system:kube-scheduler", nil, false, nil, nil},
		{"kubelet", "system:node:" + c.cfg.nodeName, []string{"system:nodes"}, false, nil, nil},
	} {
		if err := p.ensure(s.name, s.cn, s.orgs, s.server, s.ips, s.dns); err != nil {
			return err
		}
	}
	if err := p.ensureKey("sa"); err != nil {
		return err
	}
	for _, name := range []string{"kube-controller-manager", "kube-scheduler", "kubelet"} {
		if err := p.kubeconfig(c.path("kubeconfigs", name), name, c.apiURL); err != nil {
			return err
		}
	}
	return p.kubeconfig(c.path("kubeconfig"), "admin", "https://"+net.JoinHostPort("127.0.0.1", strconv.Itoa(c.cfg.apiPort)))
}

func (c *cluster) writeContainerdConfig() error {
	d := c.path("containerd")
	text := fmt.Sprintf(`version = 3
root = %[1]q
state = %[2]q

[grpc]
  address = %[3]q

[plugins.'io.containerd.internal.v1.opt']
  path = %[4]q

[plugins.'io.containerd.cri.v1.images']
  snapshotter = "overlayfs"
  [plugins.'io.containerd.cri.v1.images'.pinned_images]
    sandbox = "compositor.local/pause:1"
  [plugins.'io.containerd.cri.v1.images'.registry]
    config_path = %[9]q

[plugins.'io.containerd.cri.v1.runtime']
  netns_mounts_under_state_dir = true
  # This machine withholds CAP_SYS_RESOURCE, so no process may lower its oom_score_adj:
  # keep the sandboxes' and containers' at or above containerd's own (0).
  restrict_oom_score_adj = true
  tolerate_missing_hugetlb_controller = true
  disable_apparmor = true
  [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc]
    runtime_type = "io.containerd.runc.v2"
    [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc.options]
      SystemdCgroup = false
      BinaryName = %[8]q
      Root = %[5]q
  [plugins.'io.containerd.cri.v1.runtime'.cni]
    bin_dirs = [%[6]q]
    conf_dir = %[7]q

[plugins.'io.containerd.grpc.v1.cri']
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
`, filepath.Join(d, "root"), filepath.Join(d, "state"), filepath.Join(d, "containerd.sock"),
		filepath.Join(d, "opt"), filepath.Join(d, "runc"), c.cfg.cniBin, c.path("cni", "net.d"), c.cfg.runc,
		filepath.Join(d, "certs.d"))
	if err := writeFile(filepath.Join(d, "config.toml"), []byte(text), 0o644); err != nil {
		return err
	}
	// Images come only from the archives the runner imports. Every registry resolves to
	// a closed port on loopback, so that a pod naming an image that is not here (a
	// chart's nginx) fails to pull instead of reaching a registry outside this machine.
	if err := writeFile(filepath.Join(d, "certs.d", "_default", "hosts.toml"), []byte(`server = "http://127.0.0.1:9"

[host."http://127.0.0.1:9"]
  capabilities = ["pull", "resolve"]
`), 0o644); err != nil {
		return err
	}
	// Pods: the bridge the runner made, addresses from the subnet, and routes only to
	// it (implicit) and to the service range through the node. No masquerading, no
	// default route, no IP forwarding (isGateway would turn it on).
	_, svc, _ := net.ParseCIDR(c.cfg.serviceCIDR)
	conflist := fmt.Sprintf(`{
  "cniVersion": "1.0.0",
  "name": "compositor",
  "plugins": [
    {
      "type": "bridge",
      "bridge": %q,
      "isGateway": false,
      "ipMasq": false,
      "hairpinMode": true,
      "ipam": {
        "type": "host-local",
        "ranges": [[{"subnet": %q, "gateway": %q}]],
        "routes": [{"dst": %q, "gw": %q}],
        "dataDir": %q
      }
    }
  ]
}
`, c.cfg.bridge, c.cfg.subnet, c.nodeIP, svc.String(), c.nodeIP, c.path("cni", "ipam"))
	return writeFile(c.path("cni", "net.d", "10-compositor.conflist"), []byte(conflist), 0o644)
}

func (c *cluster) writeKubeletConfig(sock string) error {
	text := fmt.Sprintf(`apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
# This machine mounts cgroup v1; Kubernetes 1.35+ refuses it unless told otherwise.
failCgroupV1: false
cgroupDriver: cgroupfs
failSwapOn: false
# No CAP_SYS_RESOURCE here: the kubelet cannot lower its own oom_score_adj.
oomScoreAdj: 0
containerRuntimeEndpoint: unix://%[1]s
address: %[2]s
port: 10250
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: 10248
authentication:
  anonymous:
    enabled: false
  webhook:
    enabled: true
  x509:
    clientCAFile: %[3]s
authorization:
  mode: Webhook
clusterDomain: cluster.local
resolvConf: ""
registerNode: true
# One small node: never evict for disk, never collect the imported images.
evictionHard:
  memory.available: 50Mi
  nodefs.available: "0%%"
  nodefs.inodesFree: "0%%"
  imagefs.available: "0%%"
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
serializeImagePulls: false
`, sock, c.nodeIP, c.pki.path("ca.crt"))
	return writeFile(c.path("kubelet", "config.yaml"), []byte(text), 0o644)
}

// run starts a component with its output in logs/<name>.log. Components get their own
// process group, so that Ctrl-C reaches only the runner, which stops them in order;
// they die with the runner if it is killed.
func (c *cluster) run(name, bin string, env []string, args ...string) error {
	logFile, err := os.OpenFile(c.path("logs", name+".log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer logFile.Close()
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.Env = append(os.Environ(), env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("starting %s: %w", name, err)
	}
	p := &proc{name: name, cmd: cmd, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		close(p.done)
		select {
		case c.exited <- p:
		default:
		}
	}()
	c.procs = append(c.procs, p)
	logf("started %s (pid %d), log %s", name, cmd.Process.Pid, c.path("logs", name+".log"))
	return nil
}

// wait polls check until it succeeds, a component exits, ctx ends or timeout passes.
func (c *cluster) wait(ctx context.Context, what string, timeout time.Duration, check func() error) error {
	started := time.Now()
	deadline := time.After(timeout)
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	var last error
	for {
		if last = check(); last == nil {
			logf("%s ready after %s", what, time.Since(started).Round(100*time.Millisecond))
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case p := <-c.exited:
			return fmt.Errorf("%s exited while waiting for %s: %v (see %s)", p.name, what, p.err, c.path("logs", p.name+".log"))
		case <-deadline:
			return fmt.Errorf("%s not ready after %s: %v", what, timeout, last)
		case <-tick.C:
		}
	}
}

// stop ends the components in reverse order: first every container (while containerd
// still runs), then the kubelet and containerd, then the control plane.
func (c *cluster) stop() {
	for _, cl := range c.closers {
		_ = cl.Close()
	}
	for i := len(c.procs) - 1; i >= 0; i-- {
		p := c.procs[i]
		if p.name == "containerd" {
			c.removeContainers()
		}
		select {
		case <-p.done:
			continue
		default:
		}
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-p.done:
		case <-time.After(15 * time.Second):
			_ = p.cmd.Process.Kill()
			<-p.done
		}
		logf("stopped %s", p.name)
	}
}

// removeContainers kills and deletes every task in containerd's k8s.io namespace, so
// that the shims exit and unmount the containers' root filesystems.
func (c *cluster) removeContainers() {
	ctr := filepath.Join(c.cfg.nodeBin, "ctr")
	base := []string{"--address=" + c.path("containerd", "containerd.sock"), "--namespace=k8s.io", "--timeout=10s"}
	out, err := exec.Command(ctr, append(base, "tasks", "ls", "-q")...).Output()
	if err != nil {
		return
	}
	ids := strings.Fields(string(out))
	for _, id := range ids {
		_ = exec.Command(ctr, append(base, "tasks", "kill", "-a", "-s", "SIGKILL", id)...).Run()
	}
	for _, id := range ids {
		_ = exec.Command(ctr, append(base, "tasks", "delete", "-f", id)...).Run()
	}
	if len(ids) > 0 {
		logf("removed %d containers", len(ids))
	}
}

func (c *cluster) adminClient() (*http.Client, error) {
	cert, err := tls.LoadX509KeyPair(c.pki.path("admin.crt"), c.pki.path("admin.key"))
	if err != nil {
		return nil, err
	}
	ca, err := os.ReadFile(c.pki.path("ca.crt"))
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(ca)
	return &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{
		TLSClientConfig: &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{cert}},
	}}, nil
}

func httpOK(client *http.Client, url string) error {
	resp, err := client.Get(url)
	if err != nil {
		return err
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	return nil
}

func (c *cluster) nodeReady(client *http.Client) error {
	resp, err := client.Get(c.apiURL + "/api/v1/nodes/" + c.cfg.nodeName)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("node %s: %s", c.cfg.nodeName, resp.Status)
	}
	var node struct {
		Status struct {
			Conditions []struct{ Type, Status, Reason, Message string }
		}
	}
	if err := json.NewDecoder(resp.Body).Decode(&node); err != nil {
		return err
	}
	for _, cond := range node.Status.Conditions {
		if cond.Type == "Ready" {
			if cond.Status == "True" {
				return nil
			}
			return fmt.Errorf("node %s not Ready: %s %s", c.cfg.nodeName, cond.Reason, cond.Message)
		}
	}
	return fmt.Errorf("node %s has no Ready condition yet", c.cfg.nodeName)
}
