package policies

import (
	"context"

	"github.com/prometheus/client_golang/prometheus"
)

// RendersTotal counts the renders of charts this process asked for (in the sandbox or
// in-process), by what they were for: admission (a write's policies and constraints,
// its old objects included), install (the one render Helm applies), audit and plan.
// `make bench` divides it by the writes admitted. Register it where /metrics is
// served.
var RendersTotal = prometheus.NewCounterVec(prometheus.CounterOpts{
	Name: "compositor_chart_renders_total",
	Help: "Renders of charts, by purpose: admission (a write's rendered policies and constraints, its old objects included), install (the render Helm applies), audit, plan.",
}, []string{"purpose"})

// Render purposes, the label of RendersTotal.
const (
	PurposeAdmission = "admission"
	PurposeInstall   = "install"
	PurposeAudit     = "audit"
	PurposePlan      = "plan"
)

type purposeKey struct{}

// ForPurpose says what the renders made with ctx are for (RendersTotal); without it
// a render of objects is admission's.
func ForPurpose(ctx context.Context, purpose string) context.Context {
	return context.WithValue(ctx, purposeKey{}, purpose)
}

func countRender(ctx context.Context, fallback string) {
	purpose, _ := ctx.Value(purposeKey{}).(string)
	if purpose == "" {
		purpose = fallback
	}
	RendersTotal.WithLabelValues(purpose).Inc()
}
