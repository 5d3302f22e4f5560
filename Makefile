# hami-place developer targets. `make help` lists them.
SHELL := /bin/bash
PY ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
export GOTOOLCHAIN := local

.DEFAULT_GOAL := help

help: ## Show this help
	@awk 'BEGIN {FS = ":.*## "} /^[a-zA-Z0-9_-]+:.*## / {printf "  \033[36m%-16s\033[0m %s\n", $$1, $$2}' $(MAKEFILE_LIST)

$(BIN)/python:
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip

install: $(BIN)/python ## Create .venv and install the package with the agent, dev and binary extras (pinned)
	$(BIN)/pip install -q -c constraints.txt -e '.[agent,dev,binary]'

run: install ## Inspect and plan the shipped example cluster (a replayed real GPU trace): no cluster needed
	$(BIN)/kubectl-hami_place inspect --snapshot example | tail -n 14
	$(BIN)/kubectl-hami_place plan --snapshot example --max-moves 250 --max-rows 20

testbed-build: install ## Build (once) or locate the test-bed binaries: etcd, kube-*, kwok, helm
	$(BIN)/python -m testbed build

testbed: testbed-build ## Start a test bed in the background and print its kubeconfig
	$(BIN)/python -m testbed up

testbed-down: ## Stop the background test bed
	$(BIN)/python -m testbed down

lint: install ## ruff lint (with the complexity rule) + format check + the import layers (.importlinter)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/lint-imports

typecheck: install ## mypy over the packages and the harness
	$(BIN)/mypy

unit: install ## Pure-logic tests only (no control plane)
	$(BIN)/pytest tests/unit -q

test: testbed-build lint typecheck ## Everything CI runs: lint, mypy and all tests on the real test bed
	$(BIN)/python -m toolchain.debian_packages image browser  # podman for the image tests, Chromium for plan --report
	$(BIN)/pytest -q

test-hami: testbed-build ## The HAMi tier: tests that cross HAMi, with the real scheduler HAMI_SCHEDULER_BIN names
	@test -n "$$HAMI_SCHEDULER_BIN" || { echo "test-hami: set HAMI_SCHEDULER_BIN to a HAMi scheduler binary (docs/testing.md)" >&2; exit 2; }
	CI=$${CI:-true} $(BIN)/pytest -q -m "hami or hami_only"

bench-model: install ## Benchmark decode + aggregate at 5,000 nodes x 8 GPUs and 100,000 pods
	$(BIN)/python -m bench.model_bench --nodes 5000 --gpus 8 --pods 100000 --repeat 3

bench-planner: install ## The planner's evaluation: every openb list x 3 cuts x 2 departure seeds (docs/planner.md, All lists)
	$(BIN)/python -m bench.planner_bench --all-lists --json build/planner-all-lists.json

binary: install ## Build the plugin binary (PyInstaller onedir) into build/dist/kubectl-hami_place/
	$(BIN)/pyinstaller --noconfirm --log-level=WARN --distpath build/dist --workpath build/work release/kubectl-hami_place.spec
	build/dist/kubectl-hami_place/kubectl-hami_place selftest

release: binary ## Pack the binary with LICENSE into dist/ (a release archive for this OS/arch)
	$(BIN)/python -m release.release archive

image: install ## Build the agent image with podman from ./Dockerfile on a debootstrap-made Debian base (docs/release.md)
	$(BIN)/python -m release.image build

release-all: release ## Build into dist/ what this machine can of a release (archive, chart, krew manifest, image); CI builds the rest
	$(BIN)/python -m release.release local

docs: install ## Regenerate docs/cli.md from the CLI and the state diagram in docs/architecture.md
	$(BIN)/python -m release.cli_reference
	$(BIN)/python -m release.architecture_diagram

demo: testbed-build ## Live tour: test bed + 12 GPU nodes + agent, then inspect, pin and move --evict (leaves it up)
	$(BIN)/python -m testbed.demo

demo-down: ## Stop the demo (agent, stand-in, test bed)
	$(BIN)/python -m testbed.demo --down

bench-startup: binary testbed-build ## Cold-start benchmark of the binary vs kubectl (docs/benchmarks.md)
	$(BIN)/python -m bench.startup_bench

clean: ## Remove the venv and caches (not the test-bed binary cache)
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache build *.egg-info

.PHONY: help install run testbed-build testbed testbed-down lint typecheck unit test test-hami bench-model bench-planner binary release image release-all docs demo demo-down bench-startup clean
