package event

import (
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/stretchr/testify/assert"
)

func TestNote(t *testing.T) {
	short := strings.Repeat("a", MaxNote)
	assert.Equal(t, short, Note(short), "a note within the bound is left alone")

	// 2000 bytes of one-byte characters: room is left for the longest mark, "…(2000
	// more bytes)", 20 bytes; the first 1004 are kept and the mark says how many more
	// there were.
	long := strings.Repeat("a", 2000)
	got := Note(long)
	assert.Equal(t, strings.Repeat("a", 1004)+"…(996 more bytes)", got)
	assert.LessOrEqual(t, len(got), MaxNote)

	// Three-byte characters after one byte: byte 1004 is inside a 日, so the cut backs
	// off to the character's start, 1003.
	wide := "x" + strings.Repeat("日", 700)
	got = Note(wide)
	assert.LessOrEqual(t, len(got), MaxNote)
	assert.True(t, utf8.ValidString(got), got)
	assert.Equal(t, wide[:1003]+"…(1098 more bytes)", got)
}
