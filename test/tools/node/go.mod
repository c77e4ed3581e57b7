// Module node is the runner of `make cluster`: a single-node Kubernetes cluster from the
// binaries test/tools/kube, kubenode and containerd build. Standard library only; its
// own module so that it never adds to Compositor's go.mod.
module github.com/compositor-dev/compositor/test/tools/node

go 1.26.0
