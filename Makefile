# Compositor's build. `make help` lists the targets.

SHELL := /usr/bin/env bash
.SHELLFLAGS := -euo pipefail -c
.DEFAULT_GOAL := help

# The sum database does not know k8s.io/kubernetes and some staging modules; the
# committed go.sum files still verify every download.
export GONOSUMDB := k8s.io,sigs.k8s.io

BIN := $(CURDIR)/bin
K8S := $(BIN)/k8s
CONTROLLER_GEN := $(BIN)/controller-gen
TOOLS := test/tools

# Each tool is rebuilt only when its module's pins change: the stamp's name carries a
# hash of the module's go.mod and go.sum.
pins = $(shell cat $(TOOLS)/$(1)/go.mod $(TOOLS)/$(1)/go.sum | sha256sum | cut -c1-12)
# Kubernetes binaries built from the module report its version, as a release build
# does (a plain `go build` says v0.0.0-master, which fails charts' kubeVersion and
# semverCompare checks); the stamps carry it, so that a new version rebuilds them.
KUBE_VERSION := $(shell awk '$$1 == "require" && $$2 == "k8s.io/kubernetes" {print $$3}' $(TOOLS)/kube/go.mod)
KUBE_MINOR := $(word 2,$(subst ., ,$(KUBE_VERSION)))
KUBE_LDFLAGS := -X k8s.io/component-base/version.gitVersion=$(KUBE_VERSION) \
  -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=$(KUBE_MINOR) \
  -X k8s.io/component-base/version.gitTreeState=clean
KUBE_STAMP := $(K8S)/.kube-$(call pins,kube)-$(KUBE_VERSION)
ETCD_STAMP := $(K8S)/.etcd-$(call pins,etcd)
# helm reports the version of its module, as a release build does (a plain build says
# v4.3, without the patch).
HELM_VERSION := $(shell awk '$$1 == "helm.sh/helm/v4" {print $$2}' $(TOOLS)/helm/go.mod)
HELM_STAMP := $(K8S)/.helm-$(call pins,helm)-$(HELM_VERSION)
CODEGEN_STAMP := $(BIN)/.controller-gen-$(call pins,codegen)
GOLANGCI_LINT := $(BIN)/golangci-lint
LINT_STAMP := $(BIN)/.golangci-lint-$(call pins,lint)
# The rules of test/tools/lint/new-code.yml hold on the lines changed since this commit
# (the one before they came); .golangci.yml holds everywhere.
LINT_NEW_FROM ?= 566700cc35260ba2f190b37f326bebf10fee3ecb
KUBENODE_STAMP := $(K8S)/.kubenode-$(call pins,kubenode)-$(KUBE_VERSION)
CONTAINERD_STAMP := $(BIN)/node/.containerd-$(call pins,containerd)
# cert-manager's binaries are wired in the module itself, so its sources count too.
CERT_MANAGER := $(BIN)/certmanager
CERT_MANAGER_STAMP := $(CERT_MANAGER)/.cert-manager-$(shell cat $(TOOLS)/certmanager/go.mod $(TOOLS)/certmanager/go.sum $(TOOLS)/certmanager/*/main.go | sha256sum | cut -c1-12)

GO_TEST_FLAGS ?= -race -count=1 -timeout 60m
FUZZTIME ?= 1m

.PHONY: help
help: ## List the targets
	@awk 'BEGIN {FS = ":.*## "} /^[a-z0-9-]+:.*## / {printf "  %-14s %s\n", $$1, $$2}' $(MAKEFILE_LIST)

.PHONY: build
build: ## Build bin/compositor
	go build -o $(BIN)/compositor ./cmd/compositor

# earlier-compositor builds Compositor of commit $(1) (named by variable $(2), the
# $(3)) into $(4)/compositor from git history, and stamps it. The clone must hold the
# commit: a shallow clone does not.
define earlier-compositor
	@git -C $(CURDIR) cat-file -e '$(1)^{commit}' 2>/dev/null || { \
	  echo "commit $(1) ($(2), $(3)) is not in this clone:"; \
	  echo "a shallow clone does not hold it. Run 'git fetch --unshallow' (or fetch that commit), then make again."; \
	  exit 1; }
	@echo "Building the Compositor of commit $(1) into $(4)/compositor"
	mkdir -p $(4); tmp=$$(mktemp -d); trap 'rm -rf "$$tmp"' EXIT; \
	git -C $(CURDIR) archive $(1) | tar -x -C "$$tmp"; \
	cd "$$tmp" && go build -o $(4)/compositor ./cmd/compositor
	rm -f $(4)/.compositor-* && touch $@
endef

# The last Compositor on Helm 3 (issue #28): test/e2e's TestUpgradeFromHelm3Compositor
# installs compositions with it, replaces it with the current code and upgrades and
# uninstalls them. It is built from git history, so the clone must hold the commit (not
# a shallow clone). The file must be named compositor: Helm 3 manages fields as the
# binary's base name, and the new build must see the same manager to take them over.
HELM3_COMPOSITOR_COMMIT ?= 8c2afc1e5b0e6b7063bb6fb0cb83041257a4596b
HELM3_COMPOSITOR := $(BIN)/helm3/compositor
HELM3_COMPOSITOR_STAMP := $(BIN)/helm3/.compositor-$(HELM3_COMPOSITOR_COMMIT)

.PHONY: compositor-helm3
compositor-helm3: $(HELM3_COMPOSITOR_STAMP) ## Build the last Helm 3 Compositor (HELM3_COMPOSITOR_COMMIT) into bin/helm3/compositor

$(HELM3_COMPOSITOR_STAMP):
	$(call earlier-compositor,$(HELM3_COMPOSITOR_COMMIT),HELM3_COMPOSITOR_COMMIT,the last Compositor on Helm 3,$(BIN)/helm3)

# The last Compositor before release records were sealed (issue #46): an installation
# upgraded in place from it has only unsealed records, which the seal migration adopts.
UNSEALED_COMPOSITOR_COMMIT ?= ffea0ea976c4a0cd2e54a2f97af3458a72ec1aea
UNSEALED_COMPOSITOR := $(BIN)/unsealed/compositor
UNSEALED_COMPOSITOR_STAMP := $(BIN)/unsealed/.compositor-$(UNSEALED_COMPOSITOR_COMMIT)

.PHONY: compositor-unsealed
compositor-unsealed: $(UNSEALED_COMPOSITOR_STAMP) ## Build the last Compositor before sealed records (UNSEALED_COMPOSITOR_COMMIT) into bin/unsealed/compositor

$(UNSEALED_COMPOSITOR_STAMP):
	$(call earlier-compositor,$(UNSEALED_COMPOSITOR_COMMIT),UNSEALED_COMPOSITOR_COMMIT,the last Compositor before sealed records,$(BIN)/unsealed)

# The last Compositor before identities moved to its namespace (issue #46): a version's
# controller ServiceAccount <plural>-<version>-controller lived in the definition's
# namespace. test/e2e's TestUpgradeFromPreIdentityCompositor upgrades in place from it.
PREIDENTITY_COMPOSITOR_COMMIT ?= 9b9a52f9bee267cabe499cc6513d1af223e1b7cb
PREIDENTITY_COMPOSITOR := $(BIN)/preidentity/compositor
PREIDENTITY_COMPOSITOR_STAMP := $(BIN)/preidentity/.compositor-$(PREIDENTITY_COMPOSITOR_COMMIT)

.PHONY: compositor-preidentity
compositor-preidentity: $(PREIDENTITY_COMPOSITOR_STAMP) ## Build the last Compositor before identities moved (PREIDENTITY_COMPOSITOR_COMMIT) into bin/preidentity/compositor

$(PREIDENTITY_COMPOSITOR_STAMP):
	$(call earlier-compositor,$(PREIDENTITY_COMPOSITOR_COMMIT),PREIDENTITY_COMPOSITOR_COMMIT,the last Compositor before identities moved,$(BIN)/preidentity)

.PHONY: generate
generate: $(CODEGEN_STAMP) ## Regenerate deepcopy functions and the CRDs in api/crds and charts/compositor/crds
	$(CONTROLLER_GEN) object paths=./api/...
	$(CONTROLLER_GEN) crd paths=./api/... output:crd:artifacts:config=api/crds
	rm -f charts/compositor/crds/*.yaml && cp api/crds/*.yaml charts/compositor/crds/

.PHONY: verify
verify: $(CODEGEN_STAMP) ## Fail if generated files, formatting, go.mod files or the maps of the tree (test/maps) are stale
	tmp=$$(mktemp -d); trap 'rm -rf "$$tmp"' EXIT; \
	tar --exclude=./bin --exclude=./.git --exclude=./.compositor -cf - . | tar -C "$$tmp" -xf -; \
	$(MAKE) -s -C "$$tmp" generate BIN=$(BIN) CODEGEN_STAMP=$(CODEGEN_STAMP) >/dev/null; \
	for d in api charts/compositor/crds; do diff -ru $$d "$$tmp/$$d" || { echo "generated files are stale: run 'make generate'"; exit 1; }; done
	@test -z "$$(gofmt -l $$(git ls-files '*.go'))" || { gofmt -l $$(git ls-files '*.go'); echo "run gofmt"; exit 1; }
	go mod tidy -diff
	for m in $(TOOLS)/*/; do (cd $$m && go mod tidy -diff); done
	@# The maps of the tree: docs/architecture.md, reconciler/doc.go, the README's Layout.
	@# `make lint` is not run here yet: it is not proven under 3 minutes from a fresh
	@# clone on CI's 2 cores (docs/testing.md).
	go test -count=1 ./test/maps/

.PHONY: lint
lint: $(LINT_STAMP) ## golangci-lint with .golangci.yml, then the rules for new code (test/tools/lint/new-code.yml) on lines changed since LINT_NEW_FROM
	$(GOLANGCI_LINT) run ./...
	$(GOLANGCI_LINT) run -c $(TOOLS)/lint/new-code.yml --new-from-rev $(LINT_NEW_FROM) ./...

$(LINT_STAMP):
	@echo "Building golangci-lint (the first build takes about 5 minutes)"
	cd $(TOOLS)/lint && go build -o $(GOLANGCI_LINT) github.com/golangci/golangci-lint/v2/cmd/golangci-lint
	rm -f $(BIN)/.golangci-lint-* && touch $@

.PHONY: control-plane
control-plane: $(KUBE_STAMP) $(ETCD_STAMP) $(HELM_STAMP) ## Build etcd, kube-apiserver, kubectl and helm into bin/k8s

$(KUBE_STAMP):
	@echo "Building kube-apiserver and kubectl (the first build takes about 5 minutes)"
	cd $(TOOLS)/kube && go build -ldflags '$(KUBE_LDFLAGS)' -o $(K8S)/ k8s.io/kubernetes/cmd/kube-apiserver k8s.io/kubernetes/cmd/kubectl
	rm -f $(K8S)/.kube-* && touch $@

$(ETCD_STAMP):
	@echo "Building etcd (the first build takes about a minute)"
	cd $(TOOLS)/etcd && go build -o $(K8S)/etcd go.etcd.io/etcd/server/v3
	rm -f $(K8S)/.etcd-* && touch $@

$(HELM_STAMP):
	@echo "Building helm (the first build takes about a minute)"
	cd $(TOOLS)/helm && go build -ldflags '-X helm.sh/helm/v4/internal/version.version=$(HELM_VERSION)' -o $(K8S)/helm helm.sh/helm/v4/cmd/helm
	rm -f $(K8S)/.helm-* && touch $@

$(CODEGEN_STAMP):
	cd $(TOOLS)/codegen && go build -o $(CONTROLLER_GEN) sigs.k8s.io/controller-tools/cmd/controller-gen
	rm -f $(BIN)/.controller-gen-* && touch $@

# Test tiers (docs/testing.md). A package's tier follows from what its test binary links
# (`go list -test -deps`), so that no list is kept by hand:
#   unit         a package whose tests link neither test/controlplane nor
#                controller-runtime's envtest: no control plane, nothing outside Go
#   integration  a package whose tests link one of them (they start kube-apiserver and
#                etcd from bin/k8s), except test/e2e
#   e2e          test/e2e: journeys through the compositor binary, kubectl and helm
#   node         a package built only with the build tag node (test/node): a real node
# Each tier target takes WHAT, a package pattern (default ./...): `make test-integration
# WHAT=./reconciler/definition/` runs that package's tests alone, and a tier with no
# package in WHAT says so and passes. `make tiers` prints each package's tier.
WHAT ?= ./...
MODULE := github.com/compositor-dev/compositor
E2E_PACKAGE := $(MODULE)/test/e2e
CONTROL_PLANE_PACKAGES := $(MODULE)/test/controlplane sigs.k8s.io/controller-runtime/pkg/envtest
# The older Compositor builds that test/e2e's upgrade tests start from.
OLDER_COMPOSITORS := compositor-helm3 compositor-unsealed compositor-preidentity

# Prints "TIER ./path" for each of WHAT's packages that has tests (unit, integration, e2e).
list-tiers = go list -test -f '{{if not .ForTest}}{{.ImportPath}} {{join .Deps " "}}{{end}}' $(WHAT) | \
  awk -v module='$(MODULE)' -v e2e='$(E2E_PACKAGE)' -v cp=' $(CONTROL_PLANE_PACKAGES) ' \
  '$$1 ~ /\.test$$/ { pkg = substr($$1, 1, length($$1) - 5); tier = "unit"; \
    for (i = 2; i <= NF; i++) if (index(cp, " " $$i " ")) tier = "integration"; \
    if (pkg == e2e) tier = "e2e"; sub("^" module, ".", pkg); print tier, pkg }'
# $(call tier-packages,TIERS): WHAT's packages in any of TIERS, one a line.
tier-packages = $(list-tiers) | awk -v want=' $(1) ' 'index(want, " " $$1 " ") { print $$2 }'
# WHAT's node tier: the packages that `go list` finds only with the build tag node.
node-packages = comm -13 <(go list -e -f '{{if not .Error}}{{.ImportPath}}{{end}}' $(WHAT) | sort) \
  <(go list -tags node $(WHAT) | sort) | sed 's|^$(MODULE)|.|'
NODE_PACKAGES = $(shell $(node-packages))

# $(call go-test,TIERS): go test with GO_TEST_FLAGS on WHAT's packages of TIERS, in one
# run (two packages at a time), against bin/k8s. The e2e tests log Compositor's JSON lines
# as they run; a failure's own lines are printed again at the end, without them, where a
# log's tail shows them.
define go-test
@pkgs=$$($(call tier-packages,$(1))); \
if [ -z "$$pkgs" ]; then echo "no package of the $(1) tier in WHAT=$(WHAT)"; exit 0; fi; \
log=$$(mktemp); trap 'rm -f "$$log" "$$log.rc"' EXIT; \
echo "KUBEBUILDER_ASSETS=$(K8S) go test $(GO_TEST_FLAGS)" $$pkgs; \
{ rc=0; KUBEBUILDER_ASSETS=$(K8S) go test $(GO_TEST_FLAGS) $$pkgs 2>&1 || rc=$$?; echo $$rc > "$$log.rc"; } | tee "$$log"; \
status=$$(cat "$$log.rc"); \
if [ "$$status" != 0 ]; then \
  echo "=== what failed (Compositor's log lines left out)"; \
  grep -v -E '^[[:space:]]*\{' "$$log" | grep -E -A40 -e '^[[:space:]]*--- FAIL' -e '^panic: ' -e '^FAIL' | head -400; \
  echo "=== the tests that failed"; \
  grep -E -e '^[[:space:]]*--- FAIL' -e '^panic: ' -e '^FAIL[[:space:]]' "$$log" | sed 's/ (.*//' | head -20; \
fi; \
exit $$status
endef

.PHONY: test
test: control-plane compositor-helm3 compositor-unsealed compositor-preidentity ## Every tier: vet; unit, integration and e2e in one go test run with the race detector; fuzz each target briefly; then test-node
	go vet $(WHAT)
	$(call go-test,unit integration e2e)
	$(MAKE) --no-print-directory fuzz FUZZTIME=$(SMOKE_FUZZTIME)
	$(MAKE) --no-print-directory test-node

.PHONY: test-unit
test-unit: ## Unit tier: WHAT's packages whose tests start no control plane (WHAT=./pkg/..., default ./...)
	$(call go-test,unit)

.PHONY: test-integration
test-integration: control-plane ## Integration tier: WHAT's packages whose tests start kube-apiserver and etcd (test/controlplane, envtest), test/e2e aside
	$(call go-test,integration)

.PHONY: test-e2e
test-e2e: control-plane $(OLDER_COMPOSITORS) ## E2e tier: test/e2e, journeys through the compositor binary, kubectl and helm
	$(call go-test,e2e)

.PHONY: tiers
tiers: ## Print the tier of each of WHAT's packages that has tests
	@$(list-tiers) | sort
	@$(node-packages) | sed 's/^/node /'

SMOKE_FUZZTIME ?= 3s
# Minimizing a new input can outlast a short -fuzztime, which Go then reports as a
# failure ("context deadline exceeded"); inputs are kept unminimized instead.
FUZZMINIMIZETIME ?= 0

.PHONY: fuzz
fuzz: ## Run every fuzz target for FUZZTIME each (default 1m)
	grep -rH --include='*_test.go' -o '^func Fuzz[A-Za-z0-9_]*' . | sed 's|^\(.*\)/[^/]*:func |\1 |' | sort -u | \
	while read -r dir target; do \
	  echo "fuzz $$dir $$target for $(FUZZTIME)"; \
	  go test -run '^$$' -fuzz "^$$target\$$" -fuzztime $(FUZZTIME) -fuzzminimizetime $(FUZZMINIMIZETIME) "$$dir"; \
	done

BENCH_ARGS ?=

.PHONY: bench
bench: control-plane build ## Measure the live webhooks against a do-nothing webhook and Gatekeeper's engine; writes BENCHMARKS.md (about 8 minutes)
	tmp=$$(mktemp -d); trap 'rm -rf "$$tmp"' EXIT; \
	(cd $(TOOLS)/gatekeeper && go run . -json) > "$$tmp/peer.json"; \
	go run ./test/bench -compositor $(BIN)/compositor -control-plane-dir $(K8S) \
	  -peer "$$tmp/peer.json" -profile-dir $(BIN)/profiles -out BENCHMARKS.md $(BENCH_ARGS)

SCALE_ARGS ?=

.PHONY: bench-scale
bench-scale: control-plane build ## Measure definitions and compositions at scale (10, 100, 1000 definitions, 10 compositions each); writes its section of BENCHMARKS.md (at most 40 minutes)
	go run ./test/bench -scale -compositor $(BIN)/compositor -control-plane-dir $(K8S) \
	  -json $(BIN)/bench-scale.json -out BENCHMARKS.md $(SCALE_ARGS)

GATOR_VERSION ?= v3.23.1
GATOR := $(BIN)/gator-$(GATOR_VERSION)

$(GATOR):
	@mkdir -p $(BIN)/gator-build
	GONOSUMDB=k8s.io,sigs.k8s.io GOBIN=$(abspath $(BIN))/gator-build go install github.com/open-policy-agent/gatekeeper/v3/cmd/gator@$(GATOR_VERSION)
	mv $(BIN)/gator-build/gator $@

.PHONY: gatekeeper-library
gatekeeper-library: build $(GATOR) ## Run every Gatekeeper suite under LIBRARY=<checkout of gatekeeper-library> with compositor policy verify and with gator verify; prints both counts
	@test -n "$(LIBRARY)" || { echo "usage: make gatekeeper-library LIBRARY=/path/to/gatekeeper-library" >&2; exit 2; }
	@test -d "$(LIBRARY)" || { echo "LIBRARY=$(LIBRARY) is not a directory" >&2; exit 2; }
	@tmp=$$(mktemp -d); trap 'rm -rf "$$tmp"' EXIT; \
	$(BIN)/compositor policy verify "$(LIBRARY)" > "$$tmp/compositor.txt"; c=$$?; \
	$(GATOR) verify -v "$(LIBRARY)/..." > "$$tmp/gator.txt" 2>&1; g=$$?; \
	grep -v '^ok ' "$$tmp/compositor.txt"; \
	echo "gator verify ($(GATOR_VERSION)): $$(grep -c -- '^    --- PASS' "$$tmp/gator.txt" || true) cases passed, $$(grep -c -- '^    --- FAIL' "$$tmp/gator.txt" || true) failed, $$(grep -c -- '^    --- SKIP' "$$tmp/gator.txt" || true) skipped; tests: $$(grep -c -- '^--- PASS' "$$tmp/gator.txt" || true) passed, $$(grep -c -- '^--- FAIL' "$$tmp/gator.txt" || true) failed"; \
	grep -B1 -- '--- FAIL' "$$tmp/gator.txt" || true; \
	test $$c -eq 0 && test $$g -eq 0

ROLLOUT_ARGS ?=

.PHONY: bench-rollout
bench-rollout: control-plane build ## Measure a rollout's plan of 1,000 paused compositions (issue #30) and admission meanwhile; writes its section of BENCHMARKS.md (about a minute after the build)
	go run ./test/bench -rollout 1000 -compositor $(BIN)/compositor -control-plane-dir $(K8S) \
	  -json $(BIN)/bench-rollout.json -out BENCHMARKS.md $(ROLLOUT_ARGS)

CONSTRAINTS_ARGS ?=

.PHONY: bench-constraints
bench-constraints: control-plane build ## Measure /validate and one write (/mutate then /validate), with their renders per request, before and after 50 Gatekeeper ConstraintTemplates with their constraints (issues #31, #47), and the engine against Gatekeeper's on them; writes its section of BENCHMARKS.md (about 5 minutes)
	mkdir -p $(BIN)/profiles; tmp=$$(mktemp -d); trap 'rm -rf "$$tmp"' EXIT; \
	(cd $(TOOLS)/gatekeeper && go run . -constraints ../../bench/constraints -cpuprofile $(BIN)/profiles/constraints-engine.pprof -json) > "$$tmp/peer.json"; \
	go run ./test/bench -constraints test/bench/constraints -compositor $(BIN)/compositor -control-plane-dir $(K8S) \
	  -peer "$$tmp/peer.json" -profile-dir $(BIN)/profiles -json $(BIN)/bench-constraints.json -out BENCHMARKS.md $(CONSTRAINTS_ARGS)

.PHONY: dev
dev: control-plane build ## Run Compositor on a local control plane (Ctrl-C stops everything)
	$(BIN)/compositor dev --control-plane-dir $(K8S) $(DEV_ARGS)

# Compositor's image: its tag follows the chart's appVersion, which is also what the chart
# and the generated controller Deployments default to.
VERSION := $(shell sed -n 's/^appVersion: *"*\([^"]*\)"*$$/\1/p' charts/compositor/Chart.yaml)
IMAGE_REPO ?= ghcr.io/compositor-dev/compositor
IMAGE ?= $(IMAGE_REPO):$(VERSION)
IMAGES := $(BIN)/images
NODE := $(BIN)/node
PAUSE_IMAGE := compositor.local/pause:1
# Where `make image-push` sends the image; credentials as `docker login` writes them.
PUSH_IMAGE ?= $(IMAGE)
PUSH_ARGS ?=

.PHONY: image
image: ## Build Compositor's OCI image into bin/images/compositor.tar (reproducible; no container engine)
	CGO_ENABLED=0 go build -trimpath -ldflags='-s -w' -o $(IMAGES)/compositor ./cmd/compositor
	cd $(TOOLS)/image && go build -trimpath -o $(NODE)/image .
	$(NODE)/image build -binary $(IMAGES)/compositor -ref $(IMAGE) -o $(IMAGES)/compositor.tar

.PHONY: image-push
image-push: image ## Push bin/images/compositor.tar to PUSH_IMAGE (default: IMAGE); PUSH_ARGS=-insecure for a plain-HTTP registry
	$(NODE)/image push -archive $(IMAGES)/compositor.tar -ref $(PUSH_IMAGE) $(PUSH_ARGS)

.PHONY: pause-image
pause-image: ## Build the pod sandbox (pause) image into bin/images/pause.tar
	cd $(TOOLS)/image && CGO_ENABLED=0 go build -trimpath -ldflags='-s -w' -o $(IMAGES)/pause ./pause
	cd $(TOOLS)/image && go build -trimpath -o $(NODE)/image .
	$(NODE)/image build -binary $(IMAGES)/pause -ref $(PAUSE_IMAGE) -user 65535:65535 -o $(IMAGES)/pause.tar

# `make cluster`: a single-node cluster from Go modules and Debian packages.
CLUSTER_DIR := $(CURDIR)/.compositor/cluster
CLUSTER_ARGS ?=
# Debian packages the node needs: runc for containerd's shim, the CNI plugins, iptables
# (the DNAT that gives pods the API server).
NODE_DEBS := runc containernetworking-plugins iptables

.PHONY: node
node: control-plane $(KUBENODE_STAMP) $(CONTAINERD_STAMP) ## Build kubelet, kube-controller-manager, kube-scheduler and containerd; install runc and the CNI plugins (Debian)
	@missing=$$(for p in $(NODE_DEBS); do dpkg -s $$p >/dev/null 2>&1 || echo $$p; done); \
	if [ -n "$$missing" ]; then \
	  echo "Installing $$missing (Debian)"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $$missing; \
	fi

$(KUBENODE_STAMP):
	@echo "Building kubelet, kube-controller-manager and kube-scheduler (the first build takes about 6 minutes)"
	cd $(TOOLS)/kubenode && go build -ldflags '$(KUBE_LDFLAGS)' -o $(K8S)/ k8s.io/kubernetes/cmd/kubelet k8s.io/kubernetes/cmd/kube-controller-manager k8s.io/kubernetes/cmd/kube-scheduler
	rm -f $(K8S)/.kubenode-* && touch $@

# Static, without the btrfs, devmapper and zfs snapshotters (cgo); overlayfs is built in.
$(CONTAINERD_STAMP):
	@echo "Building containerd, its runc shim and ctr (the first build takes about 5 minutes)"
	cd $(TOOLS)/containerd && CGO_ENABLED=0 go build -tags no_btrfs,no_devmapper,no_zfs -o $(NODE)/ \
	  github.com/containerd/containerd/v2/cmd/containerd github.com/containerd/containerd/v2/cmd/containerd-shim-runc-v2 github.com/containerd/containerd/v2/cmd/ctr
	rm -f $(NODE)/.containerd-* && touch $@

# cert-manager for certs.mode: cert-manager (test/tools/certmanager/README.md): its
# controller and cainjector as host processes, its CRDs copied from the module cache.
.PHONY: cert-manager
cert-manager: $(CERT_MANAGER_STAMP) ## Build cert-manager's controller and cainjector into bin/certmanager, its CRDs into bin/certmanager/crds

$(CERT_MANAGER_STAMP):
	@echo "Building cert-manager's controller and cainjector (the first build takes about 3 minutes)"
	cd $(TOOLS)/certmanager && go build -o $(CERT_MANAGER)/ ./controller ./cainjector
	dir=$$(cd $(TOOLS)/certmanager && go list -m -f '{{.Dir}}' github.com/cert-manager/cert-manager); \
	rm -rf $(CERT_MANAGER)/crds && mkdir -p $(CERT_MANAGER)/crds && \
	cp "$$dir"/deploy/crds/*.yaml $(CERT_MANAGER)/crds/ && cp "$$dir"/LICENSE $(CERT_MANAGER)/LICENSE.cert-manager && \
	chmod u+w $(CERT_MANAGER)/crds/*.yaml $(CERT_MANAGER)/LICENSE.cert-manager
	rm -f $(CERT_MANAGER)/.cert-manager-* && touch $@

.PHONY: cluster
cluster: node image pause-image ## Run a single-node cluster (kubelet, containerd, bridge CNI) until Ctrl-C; kubeconfig in .compositor/cluster/kubeconfig
	cd $(TOOLS)/node && go build -o $(NODE)/cluster .
	exec $(NODE)/cluster up -dir $(CLUSTER_DIR) -k8s-bin $(K8S) -node-bin $(NODE) \
	  -image $(IMAGES)/pause.tar -image $(IMAGES)/compositor.tar $(CLUSTER_ARGS)

.PHONY: cluster-down
cluster-down: ## Stop `make cluster` and remove every process, mount, network namespace and cgroup it left
	cd $(TOOLS)/node && go build -o $(NODE)/cluster .
	$(NODE)/cluster down -dir $(CLUSTER_DIR) -k8s-bin $(K8S) -node-bin $(NODE)

# `make test-node`: the node tier, e2e on a real node (test/node, build tag node). It
# starts `make cluster`'s runner from a fresh state and stops it after, or uses a running
# one; TEST_NODE_ARGS='-run TestSeedFlow' and COMPOSITOR_NODE_KEEP=1 (keep the cluster and
# the installation) help when looking into a failure. The node's binaries are built only
# when WHAT holds a package of the tier.
TEST_NODE_ARGS ?=

.PHONY: test-node
test-node: ## Node tier on a real node: helm install compositor (2 replicas), the README's definition, composition and upgrade, failover, uninstall; then certs.mode=cert-manager against a real cert-manager
	$(if $(NODE_PACKAGES),$(MAKE) --no-print-directory node image pause-image cert-manager,@echo "no package of the node tier in WHAT=$(WHAT)")
	$(if $(NODE_PACKAGES),cd $(TOOLS)/node && go build -o $(NODE)/cluster .)
	$(if $(NODE_PACKAGES),go test -tags node -count=1 -v -timeout 20m $(NODE_PACKAGES) $(TEST_NODE_ARGS))

.PHONY: clean
clean: ## Remove bin/ and .compositor/ (after stopping `make cluster`, whose mounts live there)
	if [ -x $(NODE)/cluster ]; then $(NODE)/cluster down -dir $(CLUSTER_DIR) -k8s-bin $(K8S) -node-bin $(NODE); fi
	rm -rf $(BIN) .compositor
