// Package certs provides the webhook server's TLS: a built-in CA kept in a Secret with
// rotated serving certificates, or certificates issued by cert-manager, and the CA
// bundle injected into webhook configurations and generated CRDs.
//
// Both modes are a Provider: the server takes its certificate from GetCertificate at
// every handshake, so a renewed certificate is served without a restart, and whoever
// writes CA bundles (InjectCABundle, or the webhook configurations' installer) follows
// CABundle and Subscribe.
//
// In the built-in mode (NewBuiltin) the CA lives in a Secret of Compositor's namespace
// and every replica issues its own serving certificate from it, in memory. Replicas
// race to create and rotate the Secret through the API server's optimistic
// concurrency, and re-read it to follow each other. A CA is rotated in three steps,
// each one CAOverlap apart, so a client that trusts the bundle it last read can verify
// whatever certificate a replica serves:
//
//  1. after RenewFraction of its validity, a next CA joins the bundle;
//  2. the next CA becomes active and signs the serving certificates, the old one stays
//     in the bundle;
//  3. the old CA leaves the bundle.
//
// It needs get, create and update on Secrets in its namespace.
//
// In the cert-manager mode (NewCertManager) cert-manager issues the certificate from the
// objects NewCertManagerObjects builds, the kubelet mounts its Secret, and the provider
// reloads the files when they change; cainjector fills the webhook configurations
// annotated with InjectCAFrom.
//
// InjectCABundle needs get and patch on mutating and validating webhook configurations
// and on CustomResourceDefinitions.
package certs
