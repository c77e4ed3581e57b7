package crd

import (
	"fmt"

	chart "helm.sh/helm/v4/pkg/chart/v2"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
)

// ForChart is the CRD one chart version becomes, served alone (as `compositor crd`
// shows it and `compositor lint` checks it), with the conversions the chart declares,
// and the translation and size reports joined.
func ForChart(ch *chart.Chart, conversion ConversionWebhook) (*apiextensionsv1.CustomResourceDefinition, Report, error) {
	version, report, err := ServedVersionOf(ch)
	if err != nil {
		return nil, nil, err
	}
	obj, dropped, err := Build(BuildOptions{
		ChartName:  ch.Name(),
		Versions:   []ServedVersion{version},
		Conversion: conversion,
	})
	if err != nil {
		return nil, nil, fmt.Errorf("building the CRD of chart %s %s: %w", ch.Name(), ch.Metadata.Version, err)
	}
	return obj, append(report, dropped...), nil
}

// ServedVersionOf is the served version ch becomes: its schema translated, with what
// the translation loses, and the conversions it declares.
func ServedVersionOf(ch *chart.Chart) (ServedVersion, Report, error) {
	spec, report, err := TranslateChart(ch)
	if err != nil {
		return ServedVersion{}, nil, fmt.Errorf("translating the schema of chart %s %s: %w", ch.Name(), ch.Metadata.Version, err)
	}
	steps, err := ChartConversions(ch)
	if err != nil {
		return ServedVersion{}, nil, fmt.Errorf("chart %s %s: %w", ch.Name(), ch.Metadata.Version, err)
	}
	return ServedVersion{ChartVersion: ch.Metadata.Version, Spec: spec, Conversions: steps}, report, nil
}
