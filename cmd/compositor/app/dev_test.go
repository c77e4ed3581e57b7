package app

import (
	"bytes"
	"net"
	"regexp"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The walk-through names the chart repository dev serves, wherever
// --chart-repository-addr put it, not the default address.
func TestDevWalkThroughNamesTheChartRepository(t *testing.T) {
	url, stop, err := serveSampleCharts("127.0.0.1:0")
	require.NoError(t, err)
	defer stop()
	var out bytes.Buffer
	printWelcome(&out, "/tmp/kubeconfig", url)
	named := regexp.MustCompile(`url: (\S+), version`).FindAllStringSubmatch(out.String(), -1)
	require.Len(t, named, 1, out.String())
	assert.Equal(t, url, named[0][1])
	assert.Contains(t, out.String(), "export KUBECONFIG=/tmp/kubeconfig\n")

	// The repository turned off: no walk-through naming a repository that is not there.
	out.Reset()
	printWelcome(&out, "/tmp/kubeconfig", "")
	assert.NotContains(t, out.String(), "url:")
	assert.Contains(t, out.String(), `The sample chart repository is off (--chart-repository-addr "")`)
	assert.Contains(t, out.String(), "export KUBECONFIG=/tmp/kubeconfig\n")
}

// A repository bound to every interface is named by loopback, an address a client
// connects to and a chart URL may name; any other address as the listener has it.
func TestReachableAddr(t *testing.T) {
	for _, tc := range []struct {
		addr net.Addr
		want string
	}{
		{&net.TCPAddr{IP: net.IPv4zero, Port: 8900}, "127.0.0.1:8900"},
		{&net.TCPAddr{IP: net.IPv6unspecified, Port: 8900}, "[::1]:8900"},
		{&net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 40123}, "127.0.0.1:40123"},
		{&net.TCPAddr{IP: net.ParseIP("192.0.2.7"), Port: 80}, "192.0.2.7:80"},
	} {
		assert.Equal(t, tc.want, reachableAddr(tc.addr), "%s", tc.addr)
	}
}
