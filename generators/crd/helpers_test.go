package crd

import (
	_ "embed"
)

// testCA is a self-signed CA certificate (its key was discarded): the API server
// checks that a conversion CA bundle parses before it establishes a CRD.
//
//go:embed testdata/ca.pem
var testCA []byte

var testWebhook = ConversionWebhook{URL: "https://compositor.example:9443/convert", CABundle: testCA}
