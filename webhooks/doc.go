// Package webhooks is Compositor's admission edge: it decodes AdmissionReview and
// ConversionReview requests, runs the checks of policies/ and generators/ over them and
// encodes one answer that carries every violation at once.
package webhooks
