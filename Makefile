# dtjob — the commands a developer and CI run. See README.md.
SHELL := /bin/bash
.SHELLFLAGS := -euo pipefail -c
VENV ?= .venv
PY := $(VENV)/bin/python
TIER ?= C
ADDONS ?=
REAL_NODES ?= 1
# CLUSTER=current: the demo and the e2e tests on the kubeconfig's current context (or CONTEXT=...), with
# the images pushed to REGISTRY (kind and minikube load them without one). docs/own-cluster.md
CLUSTER ?= local
CONTEXT ?=
REGISTRY ?=
CHECKPOINT_CLAIM ?=
CURRENT := $(if $(CONTEXT),--context $(CONTEXT)) $(if $(REGISTRY),--registry $(REGISTRY))
STAGE := python3 -m hack.stages record

.PHONY: help deps venv build test-images cluster-up cluster-down cluster-status lint crd chart-package test check test-unit test-e2e demo demo-tools demo-images client-tools venv-core

help:
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | sed 's/:.*## /\t/'

deps: ## Debian packages the local cluster needs (containerd, runc, CNI plugins, buildah, mmdebstrap)
	@bash hack/install-deps.sh

venv: $(VENV)/.installed ## Python virtualenv with the operator, the trainer runtime and dev tools
$(VENV)/.installed: $(VENV)/.core pyproject.toml trainer-images/runtime/pyproject.toml
	$(PY) -m pip install -q -e '.[dev]' -e 'trainer-images/runtime[torch,tensorflow,examples,integrations,deepspeed]'
	@touch $@

# The operator's package alone: all the demo needs (torch and TensorFlow run in the images, not here).
# Each records a row of the demo's stage table (hack/stages.py: a no-op outside `make demo`).
venv-core: $(VENV)/.core
	@$(STAGE) venv $$(date +%s.%N) cached
$(VENV)/.core: pyproject.toml
	@echo "[venv] the operator's package into $(VENV)"; started=$$(date +%s.%N); \
	(test -x $(PY) || python3 -m venv $(VENV)) && $(PY) -m pip install -q --upgrade pip \
		&& $(PY) -m pip install -q -e . && $(STAGE) venv $$started done
	@touch $@

build: ## Build the cluster's Go components and the suite's Go test binary into the cache (once per version)
	@localcluster/build.sh etcd k8s kwok coredns helm kueue
	@python3 -m hack.gitops_binary

# CI builds them beside the Go components and the test venv (.ci/run: one compiles, the others mostly
# download and unpack), so that the tests only import them. The build needs the standard library and PyYAML
# alone (the operator's package, not torch nor TensorFlow), so it does not wait for the test venv.
test-images: venv-core ## Build the images the tests use into the image cache (rebuilt only when their content changes)
	$(PY) -m hack.images prebuild dtjob-operator dtjob-trainer-torch dtjob-trainer-tensorflow
	$(PY) -m hack.releases prebuild

cluster-up: venv build ## Bring the local cluster up (TIER=A|B|C, default C; ADDONS=kueue on B or C; REAL_NODES=2 on C)
	$(PY) -m localcluster up --tier $(TIER) --addons "$(ADDONS)" --real-nodes $(REAL_NODES)

cluster-down: venv ## Stop the local cluster and remove all its state
	$(PY) -m localcluster down

cluster-status: venv
	$(PY) -m localcluster status

lint: venv ## ruff, mypy --strict, import contracts, generated files up to date
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy
	$(VENV)/bin/lint-imports
	$(VENV)/bin/dtjob crd --check

crd: venv ## Regenerate crds/ from the API models, and the chart's copy
	$(VENV)/bin/dtjob crd
	cp crds/*.yaml helm/dtjob-operator/crds/

chart-package: venv build ## The chart as a release archive: .artifacts/dtjob-operator-VERSION.tgz (docs/operations.md)
	$$($(PY) -c 'from localcluster.layout import Layout; print(Layout.from_env().binary("helm"))') \
		package helm/dtjob-operator --destination .artifacts

test-unit: venv
	$(PY) -m pytest tests/unit -q

# pytest-xdist workers beside the cluster-wide tests, of which at most TRAINING_SLOTS train at once: the
# other cluster tests mostly wait, so more workers than cores (docs/testing.md).
TEST_WORKERS ?= 5
TRAINING_SLOTS ?= 3

test: deps venv build lint test-images ## The whole test suite: lint, unit, trainer, cluster, integration and e2e tests
	@# From a clean cluster: the run brings it up (and down) itself, with nothing left by a demo.
	$(PY) -m localcluster down
	$(PY) -m hack.test_suite --workers $(TEST_WORKERS) --training-slots $(TRAINING_SLOTS)

check: lint ## The inner loop, about a minute: lint, the unit tests (the pure core's properties among them), the chart
	$(PY) -m pytest tests/unit tests/chart -q -n 2

# `make demo`'s stage table: each stage writes its row here, hack.demo prints them at its end (and this
# Makefile, when a build step fails before it).
demo: export DTJOB_STAGES_DIR := $(CURDIR)/.artifacts/demo-stages
demo: ## Local cluster + operator via Helm + the DDP example trained to Succeeded (CLUSTER=current: yours)
	@# A first run builds the Go components the demo needs (not Kueue, nor kwok) while the Debian packages
	@# and the operator's package install and the images build; the test suite's heavier venv is left for
	@# `make test`.
	@rm -rf "$$DTJOB_STAGES_DIR"
ifeq ($(CLUSTER),current)
	@$(MAKE) --no-print-directory -j3 client-tools demo-images || { python3 -m hack.stages table; exit 1; }
	$(PY) -m hack.demo --cluster current $(CURRENT) $(if $(CHECKPOINT_CLAIM),--checkpoint-claim $(CHECKPOINT_CLAIM))
else
	@$(MAKE) --no-print-directory -j3 demo-tools demo-images || { python3 -m hack.stages table; exit 1; }
	$(PY) -m hack.demo
endif

test-e2e: deps venv ## The e2e tests alone (CLUSTER=current: those that run on a cluster they did not start)
ifeq ($(CLUSTER),current)
	@$(MAKE) --no-print-directory client-tools
	DTJOB_CLUSTER=current DTJOB_CONTEXT=$(CONTEXT) DTJOB_REGISTRY=$(REGISTRY) $(PY) -m pytest tests/e2e -q -ra
else
	@$(MAKE) --no-print-directory build
	$(PY) -m pytest tests/e2e -q -ra
endif

demo-tools:
	@localcluster/build.sh etcd k8s coredns helm

# kubectl and helm for a cluster of yours: those on PATH, else built into the cache.
client-tools:
	@command -v kubectl >/dev/null || localcluster/build.sh k8s
	@command -v helm >/dev/null || localcluster/build.sh helm

# The Go builds need none of the Debian packages (Go's own toolchain, no cgo): only the images and the
# cluster do.
demo-images: deps venv-core
	$(PY) -m hack.images prebuild dtjob-operator dtjob-trainer-torch --cluster $(CLUSTER)
