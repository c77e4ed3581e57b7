package policies

import (
	"context"
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

	mu   sync.Mutex
	at   time.Time
	caps *chartcommon.Capabilities
	// reading is closed when the read under way ends; nil when none is.
	reading chan struct{}
	// err is the last read's error.
	err error
}

// NewClusterCapabilities reads capabilities through dc.
func NewClusterCapabilities(dc discovery.CachedDiscoveryInterface) *ClusterCapabilities {
	return &ClusterCapabilities{discovery: dc}
}

// Warm starts the first read, so that the first render finds the capabilities known.
func (c *ClusterCapabilities) Warm() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.caps == nil {
		c.readLocked()
	}
}

// Get gives the capabilities as Helm's install builds them (action.Configuration's
// getCapabilities): the server's version, every group-version and
// group-version/kind served, and Helm's own version. Once known, they are given at
// once; once older than ClusterCapabilitiesTTL, they are given still and read again in
// the background, so that no render waits for discovery (a read that fails keeps what
// was known). Until the first read succeeds, Get waits for a read, at most until ctx is
// done: one slow discovery holds no caller past its own deadline. The value is shared:
// do not modify it.
func (c *ClusterCapabilities) Get(ctx context.Context) (*chartcommon.Capabilities, error) {
	c.mu.Lock()
	caps := c.caps
	var done <-chan struct{}
	if caps == nil || time.Since(c.at) >= ClusterCapabilitiesTTL {
		done = c.readLocked()
	}
	c.mu.Unlock()
	if caps != nil {
		return caps, nil
	}
	select {
	case <-done:
	case <-ctx.Done():
		return nil, fmt.Errorf("the cluster's .Capabilities are not read yet: %w", context.Cause(ctx))
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.caps == nil {
		return nil, c.err
	}
	return c.caps, nil
}

// readLocked starts a read unless one is under way, and gives the channel closed when
// it ends. c.mu is held.
func (c *ClusterCapabilities) readLocked() <-chan struct{} {
	if c.reading != nil {
		return c.reading
	}
	done := make(chan struct{})
	c.reading = done
	go func() {
		fresh, err := c.read()
		c.mu.Lock()
		if err == nil {
			c.caps, c.at = fresh, time.Now()
		}
		c.err, c.reading = err, nil
		c.mu.Unlock()
		close(done)
	}()
	return done
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
