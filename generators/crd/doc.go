// Package crd turns a Helm chart's values.schema.json into the CustomResourceDefinition
// through which compositions of that chart are written
// (docs/architecture.md#the-generated-crd, docs/architecture.md#schema-translation).
//
// Everything here is a pure function: no cluster, no network. The pieces are
//
//   - naming: Kind, Plural and VersionName derive the CRD's names from the chart name and
//     chart versions, or fail with ErrInvalidChartName / ErrInvalidChartVersion;
//   - translation: Translate and TranslateChart turn JSON Schema (any draft from 4 to
//     2020-12) plus the chart's values.yaml into a structural OpenAPI v3 schema for
//     spec, and list in a Report every constraint the CRD cannot carry;
//   - assembly: Build puts the served versions, the unserved storage version "hub",
//     the fixed status schema, print columns and the conversion webhook together, and
//     checks the result with the API server's own CRD validation before returning it.
//
// The translation is deliberately one-sided: the CRD schema may accept values the
// chart's JSON Schema rejects (the validating webhook applies the full schema to the
// merged values and rejects them), but it must never reject or prune values that Helm
// would accept. Every constraint dropped or widened for that reason appears in the
// Report.
package crd
