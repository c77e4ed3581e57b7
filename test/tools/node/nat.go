package main

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
)

// natChain is the runner's own chain in iptables' nat table; PREROUTING jumps to it for
// packets arriving on the bridge, and cleanup removes both.
const natChain = "COMPOSITOR-CLUSTER"

// setupServiceNAT makes the API server's service address (the service range's first
// address, port 443: what pods see as KUBERNETES_SERVICE_HOST and _PORT) reach the API
// server on the node address, for packets from the pods' bridge only. There is no
// kube-proxy; this one DNAT rule is all the service routing in-cluster clients need
// (webhook and aggregated services go to pod addresses: --enable-aggregator-routing).
// Pods route the service range through the node, so the packets arrive on the bridge
// and are delivered locally: no forwarding, no masquerading.
func (c *cluster) setupServiceNAT() error {
	removeServiceNAT(c.cfg.bridge)
	_, svcNet, err := net.ParseCIDR(c.cfg.serviceCIDR)
	if err != nil {
		return fmt.Errorf("-service-cidr: %w", err)
	}
	svcIP := append(net.IP(nil), svcNet.IP.To4()...)
	svcIP[3]++
	for _, args := range [][]string{
		{"-t", "nat", "-N", natChain},
		{"-t", "nat", "-A", natChain, "-d", svcIP.String() + "/32", "-p", "tcp", "--dport", "443",
			"-j", "DNAT", "--to-destination", fmt.Sprintf("%s:%d", c.nodeIP, c.cfg.apiPort)},
		{"-t", "nat", "-A", "PREROUTING", "-i", c.cfg.bridge, "-j", natChain},
	} {
		if out, err := exec.Command("iptables", args...).CombinedOutput(); err != nil {
			return fmt.Errorf("iptables %s: %v: %s", strings.Join(args, " "), err, out)
		}
	}
	logf("pods reach the API server at %s:443 (DNAT to %s:%d)", svcIP, c.nodeIP, c.cfg.apiPort)
	return nil
}

// removeServiceNAT deletes the jump to the runner's chain and the chain, if present.
func removeServiceNAT(bridge string) {
	if _, err := exec.LookPath("iptables"); err != nil {
		return
	}
	if exec.Command("iptables", "-t", "nat", "-S", natChain).Run() != nil {
		return
	}
	for range 10 {
		if exec.Command("iptables", "-t", "nat", "-D", "PREROUTING", "-i", bridge, "-j", natChain).Run() != nil {
			break
		}
	}
	_ = exec.Command("iptables", "-t", "nat", "-F", natChain).Run()
	_ = exec.Command("iptables", "-t", "nat", "-X", natChain).Run()
}

// kubeletChains are the chains the kubelet makes in every table it watches (canaries,
// a hint for kube-proxy, and KUBE-FIREWALL, which INPUT and OUTPUT jump to).
var kubeletChains = []struct{ table, chain string }{
	{"filter", "KUBE-FIREWALL"}, {"filter", "KUBE-KUBELET-CANARY"},
	{"nat", "KUBE-KUBELET-CANARY"}, {"mangle", "KUBE-KUBELET-CANARY"}, {"mangle", "KUBE-IPTABLES-HINT"},
}

// removeKubeletChains deletes the kubelet's chains (IPv4 and IPv6) once no kubelet runs
// on this machine: they outlive it, and KUBE-FIREWALL filters the host's traffic.
func removeKubeletChains() {
	for _, pid := range allPIDs() {
		if exe, err := os.Readlink("/proc/" + strconv.Itoa(pid) + "/exe"); err == nil &&
			filepath.Base(strings.TrimSuffix(exe, " (deleted)")) == "kubelet" {
			return // another kubelet may own them
		}
	}
	for _, tool := range []string{"iptables", "ip6tables"} {
		if _, err := exec.LookPath(tool); err != nil {
			continue
		}
		for _, hook := range []string{"INPUT", "OUTPUT"} {
			for range 10 {
				if exec.Command(tool, "-t", "filter", "-D", hook, "-j", "KUBE-FIREWALL").Run() != nil {
					break
				}
			}
		}
		for _, c := range kubeletChains {
			if exec.Command(tool, "-t", c.table, "-S", c.chain).Run() != nil {
				continue
			}
			_ = exec.Command(tool, "-t", c.table, "-F", c.chain).Run()
			_ = exec.Command(tool, "-t", c.table, "-X", c.chain).Run()
		}
	}
}
