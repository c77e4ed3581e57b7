// Package event holds what every writer of Kubernetes Events shares: the bound the API
// server puts on an Event's note, and the clipping that keeps a note within it.
package event

import (
	"fmt"
	"unicode/utf8"
)

// MaxNote is the most bytes the API server accepts in an Event's note (its message):
// NoteLengthLimit of k8s.io/kubernetes/pkg/apis/core/validation/events.go, 1024
// ("Maximal length of the note is 1kB", the note field of k8s.io/api/events/v1). The
// event of a longer note is refused, and the recorder only logs that: the event is
// lost, however much it mattered.
const MaxNote = 1024

// moreMark ends a clipped note, saying how much was cut.
const moreMark = "…(%d more bytes)"

// Note is s clipped to MaxNote bytes, so that its event is recorded: a longer s is
// cut at a character's start (never inside a UTF-8 sequence) and ends with
// "…(N more bytes)". The whole text belongs in a status or a log; the event keeps its
// beginning, which says what happened.
func Note(s string) string {
	if len(s) <= MaxNote {
		return s
	}
	// The count cut is below len(s), so its mark is at most this long.
	cut := max(MaxNote-len(fmt.Sprintf(moreMark, len(s))), 0)
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + fmt.Sprintf(moreMark, len(s)-cut)
}
