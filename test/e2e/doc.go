// Package e2e holds end-to-end journeys: the compositor binary and kubectl against a
// real control plane, asserted the way a user would see them.
package e2e
