package conversion

import (
	"fmt"
	"strconv"
	"strings"
)

// The stash names each value by its JSON Pointer (RFC 6901) from the object's root,
// e.g. /spec/a~1b/0 for the first item of the list at the key "a/b" of spec.

func pointerOf(tokens []string) string {
	var b strings.Builder
	for _, tok := range tokens {
		b.WriteByte('/')
		b.WriteString(escapePointerToken(tok))
	}
	return b.String()
}

var pointerEscaper = strings.NewReplacer("~", "~0", "/", "~1")
var pointerUnescaper = strings.NewReplacer("~1", "/", "~0", "~")

func escapePointerToken(tok string) string {
	if !strings.ContainsAny(tok, "~/") {
		return tok
	}
	return pointerEscaper.Replace(tok)
}

// parsePointer splits a JSON Pointer into its unescaped tokens.
func parsePointer(p string) ([]string, error) {
	if !strings.HasPrefix(p, "/") {
		return nil, fmt.Errorf("%q is not a JSON Pointer", p)
	}
	tokens := strings.Split(p[1:], "/")
	for i, tok := range tokens {
		for j := 0; j < len(tok); j++ {
			if tok[j] != '~' {
				continue
			}
			if j+1 == len(tok) || (tok[j+1] != '0' && tok[j+1] != '1') {
				return nil, fmt.Errorf("%q is not a JSON Pointer: ~ must be followed by 0 or 1", p)
			}
			j++
		}
		tokens[i] = pointerUnescaper.Replace(tok)
	}
	return tokens, nil
}

// parentOf is the object that holds the value at tokens, if the path leads to one.
func parentOf(obj map[string]any, tokens []string) (map[string]any, bool) {
	var cur any = obj
	for _, tok := range tokens[:len(tokens)-1] {
		switch c := cur.(type) {
		case map[string]any:
			cur = c[tok]
		case []any:
			i, err := strconv.Atoi(tok)
			if err != nil || i < 0 || i >= len(c) {
				return nil, false
			}
			cur = c[i]
		default:
			return nil, false
		}
	}
	parent, ok := cur.(map[string]any)
	return parent, ok
}

// setIfAbsent sets the value at tokens unless the value or one of its parents is not
// there to hold it.
func setIfAbsent(obj map[string]any, tokens []string, v any) {
	parent, ok := parentOf(obj, tokens)
	if !ok {
		return
	}
	if _, set := parent[tokens[len(tokens)-1]]; !set {
		parent[tokens[len(tokens)-1]] = v
	}
}

func deleteAt(obj map[string]any, tokens []string) {
	if parent, ok := parentOf(obj, tokens); ok {
		delete(parent, tokens[len(tokens)-1])
	}
}
