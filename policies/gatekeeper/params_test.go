package gatekeeper_test

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/compositor-dev/compositor/policies/gatekeeper"
)

func withSchema(obj map[string]any, schema map[string]any) map[string]any {
	crd := obj["spec"].(map[string]any)["crd"].(map[string]any)["spec"].(map[string]any)
	crd["validation"] = map[string]any{"openAPIV3Schema": schema}
	return obj
}

func TestCheckParameters(t *testing.T) {
	schema := object(t, `
type: object
properties:
  teams:
    type: array
    items: {type: string}
  max:
    type: integer
    minimum: 1
  mode:
    type: string
    enum: [strict, lax]
`)
	tmpl, err := compileObject(t, withSchema(template("K8sTeam", regoCode("", teamV0)), schema), serverOptions())
	require.NoError(t, err)
	require.Equal(t, schema, tmpl.ParametersSchema)

	tests := []struct {
		name   string
		spec   string
		fields []string // the fields refused; none when the parameters are valid
	}{
		{name: "valid", spec: "parameters: {teams: [payments, search], max: 3, mode: strict}"},
		{name: "no parameters", spec: "{}"},
		{name: "empty parameters", spec: "parameters: {}"},
		{name: "a field the schema does not name", spec: "parameters: {teams: [payments], colour: blue}"},
		{name: "a string for a list", spec: "parameters: {teams: payments}", fields: []string{"spec.parameters.teams"}},
		{name: "a number in a list of strings", spec: "parameters: {teams: [payments, 7]}", fields: []string{"spec.parameters.teams[1]"}},
		{name: "under the minimum", spec: "parameters: {max: 0}", fields: []string{"spec.parameters.max"}},
		{name: "not in the enum", spec: "parameters: {mode: loose}", fields: []string{"spec.parameters.mode"}},
		{name: "every error at once", spec: "parameters: {teams: payments, max: 0, mode: loose}", fields: []string{"spec.parameters.max", "spec.parameters.mode", "spec.parameters.teams"}},
		{name: "parameters that are not an object", spec: "parameters: [payments]", fields: []string{"spec.parameters"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tmpl.CheckParameters(constraintObject(t, "K8sTeam", "teams", tt.spec))
			if tt.fields == nil {
				assert.NoError(t, err)
				return
			}
			var pe *gatekeeper.ParametersError
			require.ErrorAs(t, err, &pe)
			assert.Equal(t, "teams", pe.Constraint)
			var fields []string
			for _, e := range pe.Errs {
				fields = append(fields, e.Field)
			}
			assert.ElementsMatch(t, tt.fields, fields)
			assert.ErrorContains(t, err, "constraint teams")
		})
	}
}

func TestCheckParametersWithoutSchema(t *testing.T) {
	tmpl := mustCompile(t, "K8sTeam", teamV0)
	assert.Nil(t, tmpl.ParametersSchema)
	assert.NoError(t, tmpl.CheckParameters(constraintObject(t, "K8sTeam", "c", "parameters: {anything: [1, {a: b}]}")))
}

// A schema the API server would not read is the template's fault, not the
// constraint's.
func TestCheckParametersBadSchema(t *testing.T) {
	tmpl, err := compileObject(t, withSchema(template("K8sTeam", regoCode("", teamV0)), map[string]any{"type": 3}), serverOptions())
	require.NoError(t, err)
	err = tmpl.CheckParameters(constraintObject(t, "K8sTeam", "c", "parameters: {teams: [a]}"))
	require.Error(t, err)
	var pe *gatekeeper.ParametersError
	assert.False(t, errors.As(err, &pe))
	assert.ErrorContains(t, err, "openAPIV3Schema")
}
