package main

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// cleanup removes what a cluster in cfg.dir may have left behind, whether its runner
// stopped cleanly or was killed: processes, mounts (container root filesystems, network
// namespaces, volumes), the bridge and its veths, the kubelet's cgroups, and the
// runtime state that does not survive a reboot. What survives a reboot stays (etcd's
// data, certificates, kubeconfigs, the image store), so the next up is quick. Each step
// is idempotent.
func cleanup(cfg *config) {
	killOwnProcesses(cfg)
	killCgroupProcesses()
	unmountUnder(cfg.dir)
	removeServiceNAT(cfg.bridge)
	removeKubeletChains()
	removeBridge(cfg.bridge)
	removeCgroups()
	for _, p := range []string{
		filepath.Join(cfg.dir, "containerd", "state"),
		filepath.Join(cfg.dir, "containerd", "runc"),
		filepath.Join(cfg.dir, "cni", "ipam"),
	} {
		_ = os.RemoveAll(p)
	}
	// The shims' sockets live in containerd's default state directory whatever the
	// config says; the shims remove them, the directories go if nothing else uses them.
	_ = syscall.Rmdir("/run/containerd/s")
	_ = syscall.Rmdir("/run/containerd")
}

// killOwnProcesses kills every process run from the cluster's binaries with a command
// line that names cfg.dir: components and shims of this cluster, not another user's
// etcd or kube-apiserver (`compositor dev`, the tests), nor a runner.
func killOwnProcesses(cfg *config) {
	self, _ := os.Executable()
	for range 50 {
		var pids []int
		for _, pid := range allPIDs() {
			if pid == os.Getpid() {
				continue
			}
			exe, err := os.Readlink("/proc/" + strconv.Itoa(pid) + "/exe")
			if err != nil {
				continue
			}
			exe = strings.TrimSuffix(exe, " (deleted)")
			if exe == self {
				continue // another runner (up or down): down signals a running up itself
			}
			if filepath.Dir(exe) != cfg.k8sBin && filepath.Dir(exe) != cfg.nodeBin {
				continue
			}
			cmdline, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cmdline")
			if err != nil || !strings.Contains(string(cmdline), cfg.dir) {
				continue
			}
			pids = append(pids, pid)
		}
		if len(pids) == 0 {
			return
		}
		for _, pid := range pids {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// cgroupRoot is the cgroup v1 hierarchy (one directory per controller) or, on a
// unified host, the v2 root; the kubelet's pods live under kubepods in each.
const cgroupRoot = "/sys/fs/cgroup"

func kubepodsDirs() []string {
	dirs, _ := filepath.Glob(filepath.Join(cgroupRoot, "*", "kubepods"))
	if d := filepath.Join(cgroupRoot, "kubepods"); isDir(d) {
		dirs = append(dirs, d)
	}
	return dirs
}

// killCgroupProcesses kills what still runs in the kubelet's pod cgroups: containers
// whose shim was killed before it could stop them.
func killCgroupProcesses() {
	for range 50 {
		found := false
		for _, root := range kubepodsDirs() {
			_ = filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
				if err != nil || d.IsDir() || d.Name() != "cgroup.procs" {
					return nil
				}
				data, _ := os.ReadFile(p)
				for _, f := range strings.Fields(string(data)) {
					if pid, err := strconv.Atoi(f); err == nil {
						found = true
						_ = syscall.Kill(pid, syscall.SIGKILL)
					}
				}
				return nil
			})
		}
		if !found {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// removeCgroups removes the kubelet's cgroups, deepest first.
func removeCgroups() {
	for _, root := range kubepodsDirs() {
		var dirs []string
		_ = filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
			if err == nil && d.IsDir() {
				dirs = append(dirs, p)
			}
			return nil
		})
		for i := len(dirs) - 1; i >= 0; i-- {
			for range 20 {
				if err := syscall.Rmdir(dirs[i]); err == nil || os.IsNotExist(err) {
					break
				}
				time.Sleep(50 * time.Millisecond)
			}
		}
	}
}

// unmountUnder detaches every mount at or below dir, deepest first.
func unmountUnder(dir string) {
	for range 10 {
		var points []string
		f, err := os.Open("/proc/self/mountinfo")
		if err != nil {
			return
		}
		sc := bufio.NewScanner(f)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			fields := strings.Fields(sc.Text())
			if len(fields) < 5 {
				continue
			}
			p := unescapeMount(fields[4])
			if p == dir || strings.HasPrefix(p, dir+"/") {
				points = append(points, p)
			}
		}
		f.Close()
		if len(points) == 0 {
			return
		}
		slices.SortFunc(points, func(a, b string) int { return len(b) - len(a) })
		for _, p := range points {
			_ = syscall.Unmount(p, syscall.MNT_DETACH)
		}
	}
}

// unescapeMount undoes mountinfo's octal escapes (\040 for a space).
func unescapeMount(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// removeBridge deletes the veths attached to the bridge, then the bridge.
func removeBridge(bridge string) {
	if err := exec.Command("ip", "link", "show", "dev", bridge).Run(); err != nil {
		return
	}
	out, _ := exec.Command("ip", "-o", "link", "show", "master", bridge).Output()
	for _, line := range strings.Split(string(out), "\n") {
		fields := strings.Fields(line)
		if len(fields) < 2 {
			continue
		}
		name, _, _ := strings.Cut(strings.TrimSuffix(fields[1], ":"), "@")
		_ = exec.Command("ip", "link", "del", name).Run()
	}
	_ = exec.Command("ip", "link", "del", bridge).Run()
}

func allPIDs() []int {
	entries, _ := os.ReadDir("/proc")
	var pids []int
	for _, e := range entries {
		if pid, err := strconv.Atoi(e.Name()); err == nil {
			pids = append(pids, pid)
		}
	}
	return pids
}

func isDir(p string) bool {
	info, err := os.Stat(p)
	return err == nil && info.IsDir()
}
