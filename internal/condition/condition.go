// Package condition holds what the conditions of CompositionDefinitions and of
// compositions share: the reasons both report, how a condition is built, and the
// error of a phase that carries the reason reporting it.
package condition

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Reasons that both CompositionDefinitions and compositions report.
const (
	ReasonAvailable = "Available"
	ReasonPaused    = "Paused"
)

// New is a condition of type kind, True when ok.
func New(kind string, ok bool, reason, message string) metav1.Condition {
	status := metav1.ConditionFalse
	if ok {
		status = metav1.ConditionTrue
	}
	return metav1.Condition{Type: kind, Status: status, Reason: reason, Message: message}
}

// Error is a failure of one phase with the condition reason that reports it.
type Error struct {
	Reason   string
	Terminal bool
	Err      error
}

func (e *Error) Error() string { return e.Err.Error() }
func (e *Error) Unwrap() error { return e.Err }
