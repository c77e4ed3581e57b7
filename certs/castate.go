package certs

import (
	"crypto/x509"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
)

// Keys of the CA Secret. The active CA issues serving certificates; the next CA is
// trusted but not used yet; the previous CA is trusted until the certificates it issued
// are gone.
const (
	secretKeyCACert         = "ca.crt"
	secretKeyCAKey          = "ca.key"
	secretKeyNextCACert     = "next-ca.crt"
	secretKeyNextCAKey      = "next-ca.key"
	secretKeyPreviousCACert = "previous-ca.crt"

	annotationNextCASince     = "certs.compositor.dev/next-ca-since"
	annotationPreviousCAUntil = "certs.compositor.dev/previous-ca-until"
)

// caState is the CA material every replica shares through the Secret. Each field is
// decided by the replica that writes the Secret, so replicas that read it agree on the
// bundle without comparing clocks.
type caState struct {
	active *keyPair
	// next is published in the bundle from nextSince and becomes active one overlap
	// later, once every client had the time to trust it.
	next      *keyPair
	nextSince time.Time
	// previous stays in the bundle until previousUntil, so certificates it issued that
	// a replica still serves keep verifying.
	previous      *x509.Certificate
	previousPEM   []byte
	previousUntil time.Time
}

// caPolicy is when a CA is replaced, from BuiltinOptions.
type caPolicy struct {
	lifetime      time.Duration
	renewFraction float64
	overlap       time.Duration
}

// caTransition names what step changed, for logs.
type caTransition string

const (
	caCreated         caTransition = "CreatedCA"
	caReplaced        caTransition = "ReplacedExpiredCA"
	caNextPublished   caTransition = "PublishedNextCA"
	caSwitched        caTransition = "SwitchedToNextCA"
	caPreviousRetired caTransition = "RetiredPreviousCA"
)

// step returns the state at now and the transitions that led to it; s is not modified.
// A nil s means there is no CA yet.
func (p caPolicy) step(s *caState, now time.Time) (*caState, []caTransition, error) {
	var next caState
	var done []caTransition
	switch {
	case s == nil || s.active == nil:
		ca, err := newCA(now, p.lifetime)
		if err != nil {
			return nil, nil, err
		}
		return &caState{active: ca}, []caTransition{caCreated}, nil
	case !now.Before(s.active.cert.NotAfter):
		// Nothing rotated the CA in time (Compositor was down for most of its lifetime):
		// there is no overlap to keep, clients cannot verify the expired CA anyway.
		if s.next != nil && now.Before(s.next.cert.NotAfter) {
			return &caState{active: s.next}, []caTransition{caSwitched}, nil
		}
		ca, err := newCA(now, p.lifetime)
		if err != nil {
			return nil, nil, err
		}
		return &caState{active: ca}, []caTransition{caReplaced}, nil
	}
	next = *s

	if next.next == nil && !now.Before(renewalTime(next.active.cert, p.renewFraction)) {
		ca, err := newCA(now, p.lifetime)
		if err != nil {
			return nil, nil, err
		}
		next.next, next.nextSince = ca, now
		done = append(done, caNextPublished)
	}
	if next.next != nil && !now.Before(next.nextSince.Add(p.overlap)) {
		next.previous, next.previousPEM = next.active.cert, next.active.certPEM
		next.previousUntil = minTime(now.Add(p.overlap), next.active.cert.NotAfter)
		next.active, next.next, next.nextSince = next.next, nil, time.Time{}
		done = append(done, caSwitched)
	}
	if next.previous != nil && !now.Before(next.previousUntil) {
		next.previous, next.previousPEM, next.previousUntil = nil, nil, time.Time{}
		done = append(done, caPreviousRetired)
	}
	return &next, done, nil
}

// wakeup is the next time step may change s.
func (p caPolicy) wakeup(s *caState) time.Time {
	at := s.active.cert.NotAfter
	if s.next == nil {
		at = minTime(at, renewalTime(s.active.cert, p.renewFraction))
	} else {
		at = minTime(at, s.nextSince.Add(p.overlap))
	}
	if s.previous != nil {
		at = minTime(at, s.previousUntil)
	}
	return at
}

// bundle is the PEM of every CA clients must trust: active, next, previous.
func (s *caState) bundle() []byte {
	var nextPEM []byte
	if s.next != nil {
		nextPEM = s.next.certPEM
	}
	return joinPEM(s.active.certPEM, nextPEM, s.previousPEM)
}

// decodeCAState reads the CA Secret. A Secret without a usable active CA is an error;
// damaged next or previous entries are dropped, which step then repairs.
func decodeCAState(secret *corev1.Secret) (*caState, error) {
	active, err := parseKeyPair(secret.Data[secretKeyCACert], secret.Data[secretKeyCAKey])
	if err != nil {
		return nil, fmt.Errorf("reading the active CA: %w", err)
	}
	s := &caState{active: active}
	if next, err := parseKeyPair(secret.Data[secretKeyNextCACert], secret.Data[secretKeyNextCAKey]); err == nil {
		s.next = next
		s.nextSince = parseTimeOr(secret.Annotations[annotationNextCASince], next.cert.NotBefore)
	}
	if pemBytes := secret.Data[secretKeyPreviousCACert]; len(pemBytes) > 0 {
		if previous, err := parseCertificate(pemBytes); err == nil {
			s.previous, s.previousPEM = previous, pemBytes
			s.previousUntil = parseTimeOr(secret.Annotations[annotationPreviousCAUntil], previous.NotAfter)
		}
	}
	return s, nil
}

// encodeInto writes s into secret's data and annotations, keeping everything else.
func (s *caState) encodeInto(secret *corev1.Secret) {
	data := map[string][]byte{
		secretKeyCACert: s.active.certPEM,
		secretKeyCAKey:  s.active.keyPEM,
	}
	if secret.Annotations == nil {
		secret.Annotations = map[string]string{}
	}
	delete(secret.Annotations, annotationNextCASince)
	delete(secret.Annotations, annotationPreviousCAUntil)
	if s.next != nil {
		data[secretKeyNextCACert], data[secretKeyNextCAKey] = s.next.certPEM, s.next.keyPEM
		secret.Annotations[annotationNextCASince] = s.nextSince.UTC().Format(time.RFC3339Nano)
	}
	if s.previous != nil {
		data[secretKeyPreviousCACert] = s.previousPEM
		secret.Annotations[annotationPreviousCAUntil] = s.previousUntil.UTC().Format(time.RFC3339Nano)
	}
	secret.Data = data
}

func parseTimeOr(value string, fallback time.Time) time.Time {
	t, err := time.Parse(time.RFC3339Nano, value)
	if err != nil {
		return fallback
	}
	return t
}
