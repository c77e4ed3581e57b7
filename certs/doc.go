// Package certs provides the webhook server's TLS: a built-in CA kept in a Secret with
// rotated serving certificates, or certificates issued by cert-manager, and the CA
// bundle injected into webhook configurations and generated CRDs.
package certs
