// Package e2e holds end-to-end journeys against a real control plane (etcd and
// kube-apiserver built by make control-plane), with kubectl, Helm and client-go as a
// user's tools, asserted the way a user would see them. Two tiers:
//
//   - The binary tier runs the built compositor executable (buildCompositor):
//     `compositor dev` (dev_test.go, dev_ready_test.go), `compositor serve` killed
//     and restarted (faults_test.go), generated controller Deployments' command
//     (controller_kept_chart_test.go), `compositor validate` beside the webhook
//     (validation_test.go) and the chart's container arguments (chart_test.go).
//   - The in-process tier, every other journey, runs app.RunServe — the function
//     `compositor serve` runs, with the same options — in the test process
//     (startCompositor), so that one test binary can run many Compositors against
//     many control planes quickly. Its sandbox workers are real child processes:
//     TestMain serves as `compositor sandbox-worker`.
//
// test/node goes further: the chart installed on a real node, from the built image.
package e2e
