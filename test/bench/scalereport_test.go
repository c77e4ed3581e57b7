package main

import (
	"strings"
	"testing"
)

func TestScaleSectionIsReplacedAndCarriedOver(t *testing.T) {
	section := scaleBegin + "\n## Scale\nnew\n" + scaleEnd + "\n"
	old := "# Benchmarks\n\n" + scaleBegin + "\n## Scale\nold\n" + scaleEnd + "\n\n## How to reproduce\n"
	got := replaceScaleSection(old, section)
	if want := "# Benchmarks\n\n" + scaleBegin + "\n## Scale\nnew\n" + scaleEnd + "\n\n## How to reproduce\n"; got != want {
		t.Errorf("replacing:\n%s\nwant:\n%s", got, want)
	}
	if got := replaceScaleSection("# Benchmarks\n", section); got != "# Benchmarks\n\n"+strings.TrimSpace(section)+"\n" {
		t.Errorf("appending: %q", got)
	}

	fresh := "# Benchmarks\nfigures\n\n## How to reproduce\nmake bench\n"
	got = carryScaleSection(old, fresh)
	if want := "# Benchmarks\nfigures\n\n" + scaleBegin + "\n## Scale\nold\n" + scaleEnd + "\n\n## How to reproduce\nmake bench\n"; got != want {
		t.Errorf("carrying:\n%s\nwant:\n%s", got, want)
	}
	if got := carryScaleSection("# Benchmarks\nno section\n", fresh); got != fresh {
		t.Errorf("nothing to carry, got %q", got)
	}
}

func TestSumWatches(t *testing.T) {
	raw := `# HELP apiserver_longrunning_requests [STABLE] Gauge of all active long-running apiserver requests broken out by verb, group, version, resource, scope and component. Not all requests are tracked this way.
# TYPE apiserver_longrunning_requests gauge
apiserver_longrunning_requests{component="apiserver",group="",resource="pods",scope="cluster",subresource="",verb="WATCH",version="v1"} 3
apiserver_longrunning_requests{component="apiserver",group="composition.krateo.io",resource="scale0001s",scope="namespace",subresource="",verb="WATCH",version="v1-0-0"} 2
apiserver_longrunning_requests{component="apiserver",group="",resource="pods",scope="namespace",subresource="log",verb="CONNECT",version="v1"} 7
# HELP other_metric Other.
# TYPE other_metric counter
other_metric 1
`
	all, compositions, err := sumWatches([]byte(raw))
	if err != nil {
		t.Fatal(err)
	}
	if all != 5 || compositions != 2 {
		t.Errorf("got %v watches, %v on compositions; want 5 and 2", all, compositions)
	}
	if _, _, err := sumWatches([]byte("other_metric 1\n")); err == nil {
		t.Error("no error without the metric")
	}
}

func TestP50CountsMissingAsSlowest(t *testing.T) {
	if got := p50([]float64{3, 1, 2}, 0); got != 2 {
		t.Errorf("got %v", got)
	}
	if got := p50([]float64{1, 2}, 1); got != 2 {
		t.Errorf("got %v", got)
	}
	if got := p50([]float64{1}, 2); got < 1e300 {
		t.Errorf("half or more missing should be +Inf, got %v", got)
	}
}
