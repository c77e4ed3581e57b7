package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	"sigs.k8s.io/yaml"

	"github.com/compositor-dev/compositor/test/samplecharts"
	"github.com/compositor-dev/compositor/webhooks"
)

// benchNamespace holds the definitions and compositions the reviews are about.
const benchNamespace = "bench"

// world is what setUp left in the cluster, for building reviews about it.
type world struct {
	spec     map[string]any   // a composition's spec that the schema and policies admit
	policies []map[string]any // the CompositionPolicies, as objects
}

// setUp creates the namespace, a definition of fireworks-app 1.1.5 and one of 2.0.0 (so
// that the CRD serves two versions and conversion has work), and the policies, and
// waits until they are all in force.
func setUp(ctx context.Context, d *dev, policyDir string) (*world, error) {
	logf("creating definitions and policies")
	if err := d.createNamespace(ctx, benchNamespace, map[string]string{"team": "a"}); err != nil {
		return nil, err
	}
	for _, v := range []string{"1.1.5", "2.0.0"} {
		name := "fireworks-" + strings.ReplaceAll(v, ".", "")
		if err := d.applyDefinition(ctx, benchNamespace, name, d.chartsURL, samplecharts.ChartName, v); err != nil {
			return nil, fmt.Errorf("creating definition %s: %w", name, err)
		}
	}
	if err := d.waitDefinitionsReady(ctx, benchNamespace, 2, 2*time.Minute); err != nil {
		return nil, err
	}
	objects, err := d.applyPolicies(ctx, policyDir)
	if err != nil {
		return nil, err
	}
	spec, err := admittedSpec()
	if err != nil {
		return nil, err
	}
	w := &world{spec: spec, policies: objects}
	// In force once a write they refuse is refused and one they admit is admitted.
	probe := append(compositionDenials(benchNamespace, 1, spec), compositionCreates(benchNamespace, 1, spec)...)
	deadline := time.Now().Add(time.Minute)
	for {
		var err error
		for _, c := range probe {
			if err = send(ctx, d.endpoint, c); err != nil {
				break
			}
		}
		if err == nil {
			return w, nil
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("the policies are not in force after a minute: %w", err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// admittedSpec is values-full.yaml of fireworks-app 1.1.5 (every documented value,
// the cache subchart on) with a replica count the policies allow.
func admittedSpec() (map[string]any, error) {
	examples, err := samplecharts.Examples("1.1.5")
	if err != nil {
		return nil, err
	}
	for _, ex := range examples {
		if ex.Name != "values-full.yaml" {
			continue
		}
		spec := map[string]any{}
		if err := yaml.Unmarshal(ex.Values, &spec); err != nil {
			return nil, err
		}
		return spec, nil
	}
	return nil, fmt.Errorf("values-full.yaml of fireworks-app 1.1.5 not found")
}

// workload is a kind of request and the concurrencies it is measured at.
type workload struct {
	name        string
	calls       []call
	concurrency []int
}

func admissionWorkloads(w *world, repoURL string) []workload {
	return []workload{
		{"composition create /validate", compositionCreates(benchNamespace, 200, w.spec), []int{1, 16}},
		{"composition update /validate", compositionUpdates(benchNamespace, 200, w.spec), []int{1, 16}},
		{"composition create /mutate", compositionMutations(benchNamespace, 200, w.spec), []int{1, 16}},
		{"composition create /mutate then /validate", compositionWrites(benchNamespace, 200, w.spec), []int{1, 16}},
		{"composition denied /validate", compositionDenials(benchNamespace, 200, w.spec), []int{16}},
		{"definition create /validate", definitionCreates(benchNamespace, repoURL, 200), []int{16}},
		{"policy create /validate", policyCreates(w.policies, 50), []int{4}},
		{"conversion of 500 objects", []call{conversionReview(benchNamespace, 500, w.spec, "v1-1-5", "v2-0-0")}, []int{1}},
	}
}

// measureAdmission runs every workload against the floor, then against Compositor.
func measureAdmission(ctx context.Context, o options, rep *report, fl *endpoint, d *dev, w *world) error {
	for _, wl := range admissionWorkloads(w, d.chartsURL) {
		if o.only != nil && !o.only.MatchString(wl.name) {
			continue
		}
		for _, c := range wl.concurrency {
			logf("%s at concurrency %d", wl.name, c)
			floorRun, err := drive(ctx, fl, wl.name, floorCalls(wl.calls), c, o.warmup, o.duration)
			if err != nil {
				return err
			}
			var profile chan error
			if o.profileDir != "" && c > 1 {
				profile = make(chan error, 1)
				path := filepath.Join(o.profileDir, profileName(wl.name, c))
				go func() {
					profile <- saveProfile(ctx, d.pprof, o.warmup+time.Second, o.duration-time.Second, path)
				}()
			}
			run, err := drive(ctx, d.endpoint, wl.name, wl.calls, c, o.warmup, o.duration)
			if err != nil {
				return err
			}
			if profile != nil {
				if err := <-profile; err != nil {
					return err
				}
			}
			rep.Admission = append(rep.Admission, comparison{Floor: floorRun, Compositor: run})
		}
	}
	return nil
}

// floorCalls are calls for the floor: it answers every review with allowed, so only
// the shape of its answer is checked.
func floorCalls(calls []call) []call {
	out := make([]call, len(calls))
	for i, c := range calls {
		out[i] = c
		switch {
		case c.floorCheck != nil:
			out[i].check = c.floorCheck
		case c.path != webhooks.ConvertPath:
			out[i].check = expectAnyAdmission
		}
		if c.then != nil {
			then := floorCalls([]call{*c.then})[0]
			out[i].then = &then
		}
	}
	return out
}

func expectAnyAdmission(body []byte) error {
	if expectAdmission(true)(body) == nil {
		return nil
	}
	return expectAdmission(false)(body)
}

// profileName is the file of the CPU profile of workload at concurrency c.
func profileName(workload string, c int) string {
	name := strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= '0' && r <= '9' {
			return r
		}
		return '-'
	}, workload)
	return fmt.Sprintf("%s-c%d.pprof", strings.Trim(name, "-"), c)
}

// saveProfile fetches a CPU profile of length d from Compositor's pprof after waiting.
func saveProfile(ctx context.Context, addr string, after, d time.Duration, path string) error {
	select {
	case <-time.After(after):
	case <-ctx.Done():
		return ctx.Err()
	}
	url := fmt.Sprintf("http://%s/debug/pprof/profile?seconds=%d", addr, max(1, int(d.Seconds())))
	resp, err := http.Get(url)
	if err != nil {
		return fmt.Errorf("fetching a CPU profile: %w", err)
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("fetching a CPU profile: HTTP %d", resp.StatusCode)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	defer func() { _ = f.Close() }()
	_, err = io.Copy(f, resp.Body)
	return err
}
