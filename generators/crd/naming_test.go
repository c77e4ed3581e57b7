package crd

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestKindAndPlural(t *testing.T) {
	for _, tc := range []struct {
		chart, kind, plural string
		err                 error
	}{
		{chart: "fireworks-app", kind: "FireworksApp", plural: "fireworksapps"},
		{chart: "x-app", kind: "XApp", plural: "xapps"},
		{chart: "redis", kind: "Redis", plural: "redises"},
		{chart: "policy", kind: "Policy", plural: "policies"},
		{chart: "gateway", kind: "Gateway", plural: "gateways"},
		{chart: "mailbox", kind: "Mailbox", plural: "mailboxes"},
		{chart: "batch", kind: "Batch", plural: "batches"},
		{chart: "my_chart.v2", kind: "MyChartV2", plural: "mychartv2s"},
		{chart: "postgresql-ha", kind: "PostgresqlHa", plural: "postgresqlhas"},
		{chart: "app--x", kind: "AppX", plural: "appxes"},
		{chart: "2048-game", err: ErrInvalidChartName},
		{chart: "", err: ErrInvalidChartName},
		{chart: "---", err: ErrInvalidChartName},
		{chart: "café", err: ErrInvalidChartName},
		{chart: "a+b", err: ErrInvalidChartName},
		{chart: strings.Repeat("a", 63), err: ErrInvalidChartName}, // plural of 64 characters
	} {
		t.Run(tc.chart, func(t *testing.T) {
			kind, err := Kind(tc.chart)
			plural, perr := Plural(tc.chart)
			if tc.err != nil {
				assert.ErrorIs(t, err, tc.err)
				assert.ErrorIs(t, perr, tc.err)
				return
			}
			require.NoError(t, err)
			require.NoError(t, perr)
			assert.Equal(t, tc.kind, kind)
			assert.Equal(t, tc.plural, plural)
		})
	}
}

func TestVersionName(t *testing.T) {
	for _, tc := range []struct {
		version, name string
		err           error
	}{
		{version: "1.1.5", name: "v1-1-5"},
		{version: "2.0.0", name: "v2-0-0"},
		{version: "1.2.3+build.7", name: "v1-2-3"},
		{version: "1.0.0-rc.1", name: "v1-0-0-rc-1"},
		{version: "1.0.0-RC.1+x", name: "v1-0-0-rc-1"},
		{version: "0.0.1-alpha-2", name: "v0-0-1-alpha-2"},
		{version: "v3.4.5", name: "v3-4-5"},
		{version: "10.20.30", name: "v10-20-30"},
		{version: "latest", err: ErrInvalidChartVersion},
		{version: "", err: ErrInvalidChartVersion},
		{version: ">=1.0.0", err: ErrInvalidChartVersion},
		{version: "1.0.0-" + strings.Repeat("x", 60), err: ErrInvalidChartVersion},
		{version: "1.0.0-rc.1-", err: ErrInvalidChartVersion}, // would end with '-'
	} {
		t.Run(tc.version, func(t *testing.T) {
			name, err := VersionName(tc.version)
			if tc.err != nil {
				assert.ErrorIs(t, err, tc.err)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tc.name, name)
		})
	}
}
