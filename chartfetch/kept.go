package chartfetch

import "strings"

// KeptArchiveSecretName is the name of the Secret, in Compositor's namespace, that keeps
// the chart archive of digest in the cluster: "chart-" and the first 20 hex digits of
// the sha256. chartstore writes and reads it; generators/rbac grants the
// controller of a version get on it alone. It lives here, below both.
func KeptArchiveSecretName(digest string) string {
	hexDigest := strings.TrimPrefix(digest, "sha256:")
	return "chart-" + hexDigest[:min(20, len(hexDigest))]
}
