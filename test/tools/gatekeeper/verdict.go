package main

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"
)

// finding is one violation reduced to what both engines can say alike: the policy
// (constraint) that found it and its message.
type finding struct {
	Policy  string
	Message string
}

func (f finding) String() string { return fmt.Sprintf("[%s] %s", f.Policy, f.Message) }

// verdict is an engine's answer to one request.
type verdict struct {
	// Denied is whether the request is refused.
	Denied bool
	// Deny and Warn are the findings of each action, sorted.
	Deny, Warn []finding
}

func (v verdict) sorted() verdict {
	for _, fs := range [][]finding{v.Deny, v.Warn} {
		slices.SortFunc(fs, func(a, b finding) int {
			return cmp.Or(cmp.Compare(a.Policy, b.Policy), cmp.Compare(a.Message, b.Message))
		})
	}
	return v
}

// checkVerdicts reviews both objects on both engines before anything is timed, so a
// run never times two engines saying different things: the admitted object must be
// admitted by both, and the denied one denied by both for the same findings (and
// warned about alike). The error says what differs.
func checkVerdicts(ctx context.Context, c *compositorSide, g *gatekeeperSide, objs *objects) error {
	for _, tc := range []struct {
		name       string
		obj        map[string]any
		wantDenied bool
	}{
		{"admitted object", objs.Admitted, false},
		{"denied object", objs.Denied, true},
	} {
		cv, err := c.verdict(ctx, tc.obj)
		if err != nil {
			return fmt.Errorf("%s: compositor: %w", tc.name, err)
		}
		gv, err := g.verdict(ctx, tc.obj)
		if err != nil {
			return fmt.Errorf("%s: gatekeeper: %w", tc.name, err)
		}
		if cv.Denied != tc.wantDenied || gv.Denied != tc.wantDenied {
			return fmt.Errorf("%s: want denied=%t, compositor says %t, gatekeeper says %t\n%s",
				tc.name, tc.wantDenied, cv.Denied, gv.Denied, compare(cv, gv))
		}
		if !slices.Equal(cv.Deny, gv.Deny) || !slices.Equal(cv.Warn, gv.Warn) {
			return fmt.Errorf("%s: the engines' findings differ\n%s", tc.name, compare(cv, gv))
		}
		if tc.wantDenied && len(cv.Deny) == 0 {
			return fmt.Errorf("%s: no denial to compare", tc.name)
		}
	}
	return nil
}

// compare lists both engines' findings one under the other.
func compare(c, g verdict) string {
	var b strings.Builder
	for _, side := range []struct {
		name string
		v    verdict
	}{{"compositor", c}, {"gatekeeper", g}} {
		fmt.Fprintf(&b, "  %s: denied=%t\n", side.name, side.v.Denied)
		for _, f := range side.v.Deny {
			fmt.Fprintf(&b, "    deny %s\n", f)
		}
		for _, f := range side.v.Warn {
			fmt.Fprintf(&b, "    warn %s\n", f)
		}
	}
	return b.String()
}
