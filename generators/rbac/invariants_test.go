package rbac

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestExportedInvariantsAreChecks(t *testing.T) {
	for _, group := range RefusedGroups() {
		_, refused := Refused(group, "anything")
		assert.True(t, refused, group)
	}
	for _, gr := range RefusedTypes() {
		_, refused := Refused(gr.Group, gr.Resource)
		assert.True(t, refused, gr.String())
	}
	assert.ElementsMatch(t, []string{"escalate", "bind", "impersonate"}, DangerousVerbs())
}
