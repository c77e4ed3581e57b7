package policies

import (
	"fmt"
	"slices"
	"sync"
	"time"

	"helm.sh/helm/v4/pkg/action"
	chartcommon "helm.sh/helm/v4/pkg/chart/common"
	"k8s.io/client-go/discovery"
)

// ClusterCapabilitiesTTL is how long a cluster's capabilities are taken as known.
// Helm asks discovery afresh for every install (invalidating a cache it may share with
// a REST mapper); one read per cluster this often gives every render the same answer
// at a fraction of the requests.
const ClusterCapabilitiesTTL = 10 * time.Second

// ClusterCapabilities are what a cluster says of itself, as a chart's .Capabilities
// shows it, read through discovery about every ClusterCapabilitiesTTL. Admission,
// the audit and the install render with the same, so that what is judged is what Helm
// applies. Safe for concurrent use.
type ClusterCapabilities struct {
	discovery discovery.CachedDiscoveryInterface

	mu      sync.Mutex
	at      time.Time
	caps    *chartcommon.Capabilities
	reading bool // a read in the background is under way
}

// NewClusterCapabilities reads capabilities through dc.
func NewClusterCapabilities(dc discovery.CachedDiscoveryInterface) *ClusterCapabilities {
	return &ClusterCapabilities{discovery: dc}
}

// Get gives the capabilities as Helm's install builds them (action.Configuration's
// getCapabilities): the server's version, every group-version and
// group-version/kind served, and Helm's own version. The first call reads them; once
// they are older than ClusterCapabilitiesTTL, a call gives them still and has them
// read again in the background, so that no render waits for discovery (a read that
// fails keeps what was known). The value is shared: do not modify it.
func (c *ClusterCapabilities) Get() (*chartcommon.Capabilities, error) {
	c.mu.Lock()
	if c.caps == nil {
		defer c.mu.Unlock()
		caps, err := c.read()
		if err != nil {
			return nil, err
		}
		c.caps, c.at = caps, time.Now()
		return caps, nil
	}
	caps := c.caps
	if time.Since(c.at) >= ClusterCapabilitiesTTL && !c.reading {
		c.reading = true
		go func() {
			fresh, err := c.read()
			c.mu.Lock()
			defer c.mu.Unlock()
			c.reading = false
			if err == nil {
				c.caps, c.at = fresh, time.Now()
			}
		}()
	}
	c.mu.Unlock()
	return caps, nil
}

func (c *ClusterCapabilities) read() (*chartcommon.Capabilities, error) {
	c.discovery.Invalidate()
	version, err := c.discovery.ServerVersion()
	if err != nil {
		return nil, fmt.Errorf("reading the cluster's version for the chart's .Capabilities: %w", err)
	}
	apis, err := action.GetVersionSet(c.discovery)
	if err != nil && !discovery.IsGroupDiscoveryFailedError(err) {
		return nil, fmt.Errorf("reading the cluster's APIs for the chart's .Capabilities: %w", err)
	}
	// Helm gathers them in a map, so each read lists them in another order: sorted,
	// the same APIs are the same capabilities, for a template that ranges over them,
	// for the render memo's key and for the audit's verdicts.
	apis = slices.Clone(apis)
	slices.Sort(apis)
	return &chartcommon.Capabilities{
		APIVersions: apis,
		KubeVersion: chartcommon.KubeVersion{Version: version.GitVersion, Major: version.Major, Minor: version.Minor},
		HelmVersion: chartcommon.DefaultCapabilities.HelmVersion,
	}, nil
}

// NextRevision is the revision an install or upgrade of the composition obj records:
// one after InstalledRevision.
func NextRevision(obj map[string]any) int { return InstalledRevision(obj) + 1 }

// InstalledRevision is the release revision a composition's status says is installed
// (status.revision, which only Compositor writes); 0 when none is.
func InstalledRevision(obj map[string]any) int {
	st, _ := obj["status"].(map[string]any)
	switch n := st["revision"].(type) {
	case int64:
		return int(max(0, n))
	case float64:
		return int(max(0, n))
	case int:
		return max(0, n)
	}
	return 0
}
