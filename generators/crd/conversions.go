package crd

import (
	"errors"
	"fmt"

	"github.com/Masterminds/semver/v3"
	chart "helm.sh/helm/v4/pkg/chart/v2"
	"sigs.k8s.io/yaml"

	corev1alpha1 "github.com/compositor-dev/compositor/api/core/v1alpha1"
)

// ConversionsFile is the file of a chart that declares how the values of its earlier
// versions convert to its own (docs/conversion.md#declared-conversions).
const ConversionsFile = "values.conversions.yaml"

// ErrBadConversionsFile means a chart's ConversionsFile cannot be read.
var ErrBadConversionsFile = errors.New("unreadable " + ConversionsFile)

// conversionsFile is the content of a ConversionsFile.
type conversionsFile struct {
	Conversions []corev1alpha1.ConversionStep `json:"conversions"`
}

// ChartConversions reads the conversion steps ch declares in its ConversionsFile, none
// when it has no such file. Every step must end at or before ch's own version.
func ChartConversions(ch *chart.Chart) ([]corev1alpha1.ConversionStep, error) {
	for _, f := range ch.Files {
		if f == nil || f.Name != ConversionsFile {
			continue
		}
		var file conversionsFile
		if err := yaml.UnmarshalStrict(f.Data, &file); err != nil {
			return nil, fmt.Errorf("%w: %w", ErrBadConversionsFile, err)
		}
		own, err := semver.NewVersion(ch.Metadata.Version)
		if err != nil {
			return nil, fmt.Errorf("%w: the chart's version %q: %w", ErrBadConversionsFile, ch.Metadata.Version, err)
		}
		for i, s := range file.Conversions {
			to, err := semver.NewVersion(s.To)
			if err == nil && own.LessThan(to) {
				return nil, fmt.Errorf("%w: conversions[%d].to: %s is later than the chart's own version %s", ErrBadConversionsFile, i, s.To, own)
			}
		}
		return file.Conversions, nil
	}
	return nil, nil
}
