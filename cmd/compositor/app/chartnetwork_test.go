package app

import (
	"net/netip"
	"testing"

	"github.com/spf13/pflag"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestAllowChartNetworkFlag(t *testing.T) {
	t.Run("serve: nothing allowed by default", func(t *testing.T) {
		opts, err := parse(t, nil, nil)
		require.NoError(t, err)
		assert.Empty(t, opts.AllowChartNetworks)
	})
	t.Run("serve: repeatable and comma-separated", func(t *testing.T) {
		opts, err := parse(t, []string{"--allow-chart-network", "10.0.0.0/8", "--allow-chart-network=fd00::/8,192.168.4.0/24"}, nil)
		require.NoError(t, err)
		assert.Equal(t, []netip.Prefix{
			netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("fd00::/8"), netip.MustParsePrefix("192.168.4.0/24"),
		}, opts.AllowChartNetworks)
	})
	t.Run("controller has the same flag", func(t *testing.T) {
		opts := NewControllerOptions()
		fs := pflag.NewFlagSet("controller", pflag.ContinueOnError)
		opts.AddFlags(fs)
		require.NoError(t, fs.Parse([]string{"--allow-chart-network", "100.64.0.0/10"}))
		assert.Equal(t, []netip.Prefix{netip.MustParsePrefix("100.64.0.0/10")}, opts.AllowChartNetworks)
	})
	for arg, want := range map[string]string{
		"10.0.0.0":    `invalid argument "10.0.0.0" for "--allow-chart-network" flag: "10.0.0.0" is not a CIDR`,
		"10.0.0.0/33": `"10.0.0.0/33" is not a CIDR`,
		"10.1.2.3/8":  `"10.1.2.3/8" has host bits set; did you mean 10.0.0.0/8?`,
	} {
		t.Run("refuses "+arg, func(t *testing.T) {
			opts := NewServeOptions()
			fs := pflag.NewFlagSet("serve", pflag.ContinueOnError)
			opts.AddFlags(fs)
			err := fs.Parse([]string{"--allow-chart-network", arg})
			require.Error(t, err)
			assert.Contains(t, err.Error(), want)
		})
	}
}
