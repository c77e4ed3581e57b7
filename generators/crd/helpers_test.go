package crd

var testWebhook = ConversionWebhook{URL: "https://compositor.example:9443/convert", CABundle: []byte("test-ca")}
