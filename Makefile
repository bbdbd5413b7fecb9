# fairqueue: a Kubernetes operator and a data-plane admission controller for
# weighted fair queuing. `make help` lists the targets.

# Tools are pinned here and installed into bin/ from the Go module proxy.
CONTROLLER_TOOLS_VERSION ?= v0.23.0
GOLANGCI_LINT_VERSION ?= v2.15.0
VEGETA_VERSION ?= v12.13.0
# Go module version of Prometheus (v0.316.0 is Prometheus 3.16.0) for promtool;
# keep it equal to github.com/prometheus/prometheus in test/monitoring/go.mod
# (the PromQL parser).
PROMETHEUS_VERSION ?= v0.316.0
# The official OpenAI Node client, from the npm registry, for the real-client tests.
OPENAI_NODE_VERSION ?= 6.49.0
# The Vercel AI SDK and LangChain's OpenAI chat model, for the same tests: the
# newest releases that still run on Node 20 (ai 7 and @langchain/openai 1.6
# need Node 22). LangChain's own openai dependency is pinned to
# OPENAI_NODE_VERSION, and zod (both peers) too, so an install is repeatable.
AI_SDK_VERSION ?= 6.0.325
AI_SDK_OPENAI_COMPATIBLE_VERSION ?= 2.0.92
LANGCHAIN_OPENAI_VERSION ?= 1.5.8
LANGCHAIN_CORE_VERSION ?= 1.4.0
ZOD_VERSION ?= 4.6.7

LOCALBIN ?= $(CURDIR)/bin
CONTROLLER_GEN ?= $(LOCALBIN)/controller-gen
GOLANGCI_LINT ?= $(LOCALBIN)/golangci-lint
VEGETA ?= $(LOCALBIN)/vegeta
PROMTOOL ?= $(LOCALBIN)/promtool
OPENAI_NODE_DIR ?= $(LOCALBIN)/node-openai-$(OPENAI_NODE_VERSION)
NODE_CLIENTS_DIR ?= $(LOCALBIN)/node-clients-ai$(AI_SDK_VERSION)-lc$(LANGCHAIN_OPENAI_VERSION)
# envtest binaries (kube-apiserver, etcd, maybe kubectl) built from source by hack/envtest.sh.
ENVTEST_DIR ?= $(LOCALBIN)/k8s
KUBECTL ?= $(shell command -v kubectl 2>/dev/null || echo $(ENVTEST_DIR)/kubectl)

GO ?= go
# The version and revision stamped into the binaries and images, which print
# them for --version (internal/version). An image's build context has no .git,
# so there the stamp is the only source; an empty VERSION (an untagged tree)
# leaves the module version the toolchain records.
VERSION ?= $(shell git describe --tags --dirty 2>/dev/null)
REVISION ?= $(shell git rev-parse HEAD 2>/dev/null)
VERSION_PKG = github.com/fairqueue/fairqueue/internal/version
GO_LDFLAGS = -X $(VERSION_PKG).version=$(VERSION) -X $(VERSION_PKG).revision=$(REVISION)
# Where docker-build tags the images.
IMAGE_REPO ?= ghcr.io/fairqueue
IMAGE_TAG ?= dev
GOTEST_FLAGS ?= -count=1 -timeout=20m
PKGS ?= ./...
# Modules of their own beside the product's, so that their dependencies stay
# out of its go.mod: the monitoring checks (Prometheus's PromQL parser) and
# the demo command (gonum plot for its chart). vet, lint and test cover them.
TOOL_MODULES = test/monitoring hack/demo

SHELL = /usr/bin/env bash -o pipefail
.SHELLFLAGS = -ec

.PHONY: all
all: build

##@ General

.PHONY: help
help: ## Show this help (coloured only on a terminal).
	@if [ -t 1 ]; then c='\033[36m' b='\033[1m' r='\033[0m'; else c= b= r=; fi; \
	awk -v c="$$c" -v b="$$b" -v r="$$r" 'BEGIN {FS = ":.*##"; printf "\nUsage:\n  make %s<target>%s\n", c, r} /^[a-zA-Z_0-9-]+:.*?##/ { printf "  %s%-16s%s %s\n", c, $$1, r, $$2 } /^##@/ { printf "\n%s%s%s\n", b, substr($$0, 5), r } ' $(MAKEFILE_LIST)

##@ Development

.PHONY: manifests
manifests: controller-gen ## Generate the CRD and the RBAC Role from the kubebuilder markers, and the plain Prometheus rule file from the PrometheusRule.
	$(CONTROLLER_GEN) crd:allowDangerousTypes=true paths=./api/... output:crd:artifacts:config=config/crd/bases
	cp config/crd/bases/fairqueue.dev_fairqueuepolicies.yaml dataplane/reload/fairqueuepolicy_crd.yaml # --policy validates with it
	$(CONTROLLER_GEN) rbac:roleName=manager-role paths=./controllers/... output:rbac:artifacts:config=config/rbac
	$(GO) run ./hack/promrules

.PHONY: generate
generate: controller-gen ## Generate DeepCopy methods for the API types and the data-plane config.
	$(CONTROLLER_GEN) object:headerFile=hack/boilerplate.go.txt paths=./api/...
	$(CONTROLLER_GEN) object:headerFile=hack/boilerplate.go.txt paths=./dataplane/config/...
	gofmt -s -w dataplane/config/zz_generated.deepcopy.go # controller-gen writes an empty import () there

.PHONY: docs
docs: manifests ## Regenerate the FairQueuePolicy field table of docs/reference.md from the CRD.
	$(GO) run ./hack/apiref

.PHONY: fmt
fmt: ## Run gofmt on the code.
	gofmt -s -w $$(git ls-files '*.go' ; git ls-files --others --exclude-standard '*.go')

.PHONY: vet
vet: ## Run go vet.
	$(GO) vet $(PKGS)
	@for m in $(TOOL_MODULES); do echo "$(GO) vet ./... in $$m"; $(GO) -C $$m vet ./... || exit 1; done

.PHONY: lint
lint: golangci-lint ## Run golangci-lint.
	$(GOLANGCI_LINT) run $(PKGS)
	@for m in $(TOOL_MODULES); do echo "golangci-lint run ./... in $$m"; (cd $$m && $(GOLANGCI_LINT) run ./...) || exit 1; done

# Generated files outside api/ and config/: the data-plane config's DeepCopy
# and the CRD copy --policy validates with.
GENERATED_ELSEWHERE = dataplane/config/zz_generated.deepcopy.go dataplane/reload/fairqueuepolicy_crd.yaml

.PHONY: verify
verify: manifests generate docs ## Fail when generated code, manifests, docs or formatting are stale.
	@out=$$(gofmt -s -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt needed on:"; echo "$$out"; exit 1; fi
	@if ! git diff --quiet -- api config docs $(GENERATED_ELSEWHERE); then \
		echo "Generated files are stale: run 'make generate manifests docs' and commit the result:"; \
		git --no-pager diff --stat -- api config docs $(GENERATED_ELSEWHERE); exit 1; fi
	@untracked=$$(git ls-files --others --exclude-standard -- api config docs $(GENERATED_ELSEWHERE)); if [ -n "$$untracked" ]; then \
		echo "Generated files are not committed:"; echo "$$untracked"; exit 1; fi
	@echo "verify: generated code, manifests and formatting are up to date"

.PHONY: test
test: vet envtest promtool openai-node node-clients ## Run all unit and envtest tests against a real API server (and the alerts' promtool tests, and the openai, AI SDK and LangChain npm clients').
	KUBEBUILDER_ASSETS=$(ENVTEST_DIR) PROMTOOL=$(PROMTOOL) OPENAI_NODE_MODULES=$(OPENAI_NODE_DIR)/node_modules \
		NODE_CLIENTS_MODULES=$(NODE_CLIENTS_DIR)/node_modules $(GO) test $(GOTEST_FLAGS) $(PKGS)
	@for m in $(TOOL_MODULES); do echo "$(GO) test ./... in $$m"; \
		KUBEBUILDER_ASSETS=$(ENVTEST_DIR) PROMTOOL=$(PROMTOOL) $(GO) -C $$m test $(GOTEST_FLAGS) ./... || exit 1; done

.PHONY: test-soak
test-soak: ## Run the wall-clock soak tests (build tag soak: fleet shares on a real redis-server over seconds of real time). Not part of CI: their rates depend on the machine's load.
	$(GO) test -tags soak -count=1 -timeout=10m -run 'TestRealRedisFleet' -v ./dataplane/fleet/

.PHONY: test-alerts
test-alerts: promtool ## Unit-test config/prometheus with promtool and check every PromQL expression of the kit.
	PROMTOOL=$(PROMTOOL) $(GO) -C test/monitoring test -count=1 -v ./...

.PHONY: bench
bench: ## Run every data-plane benchmark (docs/benchmarks.md quotes them).
	$(GO) test -run '^$$' -bench . -benchmem ./dataplane/...

.PHONY: bench-http
bench-http: vegeta ## Drive a bare httputil.ReverseProxy and the data plane with vegeta, side by side, and print CPU-per-request and throughput ratios (BENCH_HTTP_FLAGS="--rounds 5 --duration 3s").
	@tmp=$$(mktemp -d) && trap 'rm -rf "$$tmp"' EXIT && \
		$(GO) build -o "$$tmp/dataplane" ./cmd/dataplane && $(GO) build -o "$$tmp/bench-http" ./hack/bench-http && \
		"$$tmp/bench-http" --dataplane "$$tmp/dataplane" --vegeta $(VEGETA) $(BENCH_HTTP_FLAGS)

.PHONY: bench-capacity
bench-capacity: ## Three tenants on a simulated vLLM server (internal/modelsim): TTFT, completions/s and output tokens/s per tenant for no gateway, a static model limit, and capacity mode (plain, cost: Tokens, bands), side by side (about 12 minutes; BENCH_CAPACITY_FLAGS="--heavy-prompts 1500 --duration 20s").
	@tmp=$$(mktemp -d) && trap 'rm -rf "$$tmp"' EXIT && \
		$(GO) build -o "$$tmp/dataplane" ./cmd/dataplane && $(GO) build -o "$$tmp/bench-capacity" ./hack/bench-capacity && \
		"$$tmp/bench-capacity" --dataplane "$$tmp/dataplane" $(BENCH_CAPACITY_FLAGS)

.PHONY: bench-check
bench-check: vegeta ## Run the benchmarks whose ratios docs/benchmarks.md reports and fail when a median misses its target (about 2 minutes; CI passes BENCH_CHECK_FLAGS="--report" to print without failing).
	@tmp=$$(mktemp -d) && trap 'rm -rf "$$tmp"' EXIT && \
		$(GO) build -o "$$tmp/dataplane" ./cmd/dataplane && $(GO) build -o "$$tmp/bench-http" ./hack/bench-http && \
		$(GO) run ./hack/bench-check --bench-http "$$tmp/bench-http" --dataplane "$$tmp/dataplane" --vegeta $(VEGETA) $(BENCH_CHECK_FLAGS)

# Fuzz budgets are execution counts, not durations: Go 1.26's coordinator
# races a -fuzztime deadline and can fail a target with a bare "context
# deadline exceeded" and no crasher (go.dev/issue/75804, fixed in Go 1.27);
# a count has no deadline to race. Minimising a new input is bounded too.
FUZZ_TIME ?= 100000x
FUZZ_MINIMIZE ?= 500x

.PHONY: fuzz
fuzz: ## Run every fuzz target (func Fuzz* in a _test.go file) for FUZZ_TIME executions each (100000x), starting from its checked-in corpus.
	@set -e; grep -rHo --include='*_test.go' '^func Fuzz[A-Za-z0-9_]*' . | grep -v '^./bin/' | sort | \
	while IFS=: read -r file decl; do \
		target=$${decl#func }; pkg=./$$(dirname "$${file#./}"); \
		echo "fuzz: $$pkg $$target ($(FUZZ_TIME))"; \
		$(GO) test -run '^$$' -fuzz "^$$target\$$" -fuzztime $(FUZZ_TIME) -fuzzminimizetime $(FUZZ_MINIMIZE) "$$pkg"; \
	done

# The demo command is a module of its own (hack/demo/go.mod); it is built
# into a temporary directory and run from the repository root.
DEMO_RUN = tmp=$$(mktemp -d) && trap 'rm -rf "$$tmp"' EXIT && \
	$(GO) -C hack/demo build -o "$$tmp/demo" . && "$$tmp/demo"

.PHONY: demo
demo: envtest ## Run the three-tenant fair-share demo (SCENARIO=tokens, bands or fleet for the others) with a local control plane and the operator (the demo runs a little over a minute; the first run builds kube-apiserver and etcd: ~10-20 min on 2 cores, cached in bin/ afterwards; DEMO_FLAGS="--duration 30s").
	@$(DEMO_RUN) $(DEMO_FLAGS)

.PHONY: demo-standalone
demo-standalone: ## Run the same fair-share scenario (or SCENARIO=tokens, bands) on one data plane reading files (dataplane --policy), with no control plane to build (about a minute; DEMO_FLAGS="--duration 20s").
	@$(DEMO_RUN) --standalone --duration 40s $(DEMO_FLAGS)

.PHONY: demo-fleet
demo-fleet: ## Run three replicas sharing one Redis limit with skewed routing: live fleet shares, a Redis outage, a chart (about 30s; DEMO_FLAGS="--failure-mode Open").
	@$(DEMO_RUN) --scenario fleet $(DEMO_FLAGS)

.PHONY: test-e2e
test-e2e: envtest ## Run the demo's scenario headless with assertions through the whole stack.
	$(GO) test -tags e2e -count=1 -timeout=20m -v ./test/e2e/

##@ Build

.PHONY: build
build: ## Build the operator and data-plane binaries into bin/.
	$(GO) build -ldflags "$(GO_LDFLAGS)" -o $(LOCALBIN)/manager ./cmd/manager
	$(GO) build -ldflags "$(GO_LDFLAGS)" -o $(LOCALBIN)/dataplane ./cmd/dataplane

.PHONY: docker-build
docker-build: ## Build the manager and data-plane images (IMAGE_REPO/manager:IMAGE_TAG, IMAGE_REPO/dataplane:IMAGE_TAG), stamped with VERSION and REVISION for --version.
	for img in manager dataplane; do \
		docker build -f Dockerfile.$$img --build-arg VERSION=$(VERSION) --build-arg REVISION=$(REVISION) -t $(IMAGE_REPO)/$$img:$(IMAGE_TAG) . ; \
	done

.PHONY: plugin
plugin: ## Build the kubectl plugin into bin/kubectl-fairqueue (put it on PATH to use `kubectl fairqueue`).
	$(GO) build -ldflags "$(GO_LDFLAGS)" -o $(LOCALBIN)/kubectl-fairqueue ./cmd/kubectl-fairqueue

.PHONY: run
run: manifests generate ## Run the operator against the cluster of the current kubeconfig.
	$(GO) run ./cmd/manager

##@ Deployment

.PHONY: install
install: manifests ## Install the CRDs into the cluster of the current kubeconfig.
	$(KUBECTL) apply --server-side -f config/crd/bases

.PHONY: uninstall
uninstall: manifests ## Remove the CRDs from the cluster of the current kubeconfig.
	$(KUBECTL) delete --ignore-not-found -f config/crd/bases

##@ Tools

.PHONY: envtest
envtest: ## Build kube-apiserver and etcd (pinned in hack/envtest/go.mod) into bin/k8s (first run ~10-20 min on 2 cores, with a progress line every 15s).
	@hack/envtest.sh >/dev/null

.PHONY: controller-gen
controller-gen: $(CONTROLLER_GEN)
$(CONTROLLER_GEN): $(LOCALBIN)
	$(call go-install-tool,$(CONTROLLER_GEN),sigs.k8s.io/controller-tools/cmd/controller-gen,$(CONTROLLER_TOOLS_VERSION))

.PHONY: golangci-lint
golangci-lint: $(GOLANGCI_LINT)
$(GOLANGCI_LINT): $(LOCALBIN)
	$(call go-install-tool,$(GOLANGCI_LINT),github.com/golangci/golangci-lint/v2/cmd/golangci-lint,$(GOLANGCI_LINT_VERSION))

.PHONY: vegeta
vegeta: $(VEGETA)
$(VEGETA): $(LOCALBIN)
	$(call go-install-tool,$(VEGETA),github.com/tsenart/vegeta/v12,$(VEGETA_VERSION))
.PHONY: openai-node
openai-node: $(OPENAI_NODE_DIR)/node_modules/openai ## Install the openai npm package (pinned by OPENAI_NODE_VERSION) into bin/ for the real-client tests.
$(OPENAI_NODE_DIR)/node_modules/openai: | $(LOCALBIN)
	mkdir -p $(OPENAI_NODE_DIR)
	npm install --prefix $(OPENAI_NODE_DIR) --no-save --no-audit --no-fund --silent openai@$(OPENAI_NODE_VERSION)

.PHONY: node-clients
node-clients: $(NODE_CLIENTS_DIR)/node_modules/.installed ## Install the AI SDK (ai, @ai-sdk/openai-compatible) and LangChain (@langchain/openai, @langchain/core) npm packages, pinned above, into bin/ for the real-client tests.
# The marker is written last, so an interrupted install is redone.
$(NODE_CLIENTS_DIR)/node_modules/.installed: | $(LOCALBIN)
	mkdir -p $(NODE_CLIENTS_DIR)
	npm install --prefix $(NODE_CLIENTS_DIR) --no-save --no-audit --no-fund --silent \
		ai@$(AI_SDK_VERSION) @ai-sdk/openai-compatible@$(AI_SDK_OPENAI_COMPATIBLE_VERSION) \
		@langchain/openai@$(LANGCHAIN_OPENAI_VERSION) @langchain/core@$(LANGCHAIN_CORE_VERSION) \
		openai@$(OPENAI_NODE_VERSION) zod@$(ZOD_VERSION)
	touch $@

.PHONY: promtool
promtool: $(PROMTOOL) ## Build promtool (pinned by PROMETHEUS_VERSION) into bin/.
$(PROMTOOL): $(LOCALBIN)
	$(call go-install-tool,$(PROMTOOL),github.com/prometheus/prometheus/cmd/promtool,$(PROMETHEUS_VERSION))

$(LOCALBIN):
	mkdir -p $(LOCALBIN)

# go-install-tool installs package $(2) at version $(3) as $(1)-$(3) and links
# $(1) to it, so changing a pinned version reinstalls the tool.
define go-install-tool
@[ -f "$(1)-$(3)" ] && [ "$$(readlink -- "$(1)" 2>/dev/null)" = "$(notdir $(1))-$(3)" ] || { \
set -e; \
echo "Installing $(2)@$(3)"; \
rm -f "$(1)"; \
GOBIN="$(LOCALBIN)" $(GO) install $(2)@$(3); \
mv "$(LOCALBIN)/$$(basename "$(1)")" "$(1)-$(3)"; \
ln -sf "$(notdir $(1))-$(3)" "$(1)"; \
}
endef
