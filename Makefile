# vllm-fleet: one entry point for setup, checks and the lab.
# `make test` is what CI runs (.ci/run); it builds .venv itself.
SHELL := /bin/bash
.SHELLFLAGS := -euo pipefail -c
.DEFAULT_GOAL := help

PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
# Lint and syntax-check run with the venv's tools first on PATH (molecule and
# ansible-lint shell out to ansible-* by name).
export PATH := $(CURDIR)/$(BIN):$(PATH)
export ANSIBLE_CONFIG := $(CURDIR)/ansible.cfg

PLAYBOOKS := site.yml $(wildcard playbooks/*.yml) $(wildcard lab/playbooks/*.yml)

.PHONY: watch-tools help venv lint yamllint ansible-lint ruff syntax unit test lab-e2e bench clean demo molecule

include lab/lab.mk

help: ## Show the targets
	@grep -hE '^[a-z0-9-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-14s %s\n", $$1, $$2}'

venv: $(STAMP) ## Create or refresh .venv from requirements.txt

# The gate goes in editable, so `python -m vllm_fleet_gate` runs the clone's
# code. No build isolation: the pinned setuptools builds it, with no download.
$(STAMP): requirements.txt constraints.txt gate/pyproject.toml
	@echo ">> building $(VENV) from requirements.txt"
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip -c constraints.txt
	$(BIN)/python -m pip install --quiet -r requirements.txt -c constraints.txt
	$(BIN)/python -m pip install --quiet --no-deps --no-build-isolation --editable ./gate
	@touch $@

yamllint: $(STAMP)
	@echo ">> yamllint"
	$(BIN)/yamllint --strict .

ansible-lint: $(STAMP)
	@echo ">> ansible-lint (production profile)"
	$(BIN)/ansible-lint --strict --offline

ruff: $(STAMP)
	@echo ">> ruff (ruff.toml)"
	$(BIN)/ruff check .

lint: yamllint ansible-lint ruff ## yamllint + ansible-lint + ruff

# One ansible-playbook for them all (about 2 s; one a playbook took 30 s): it
# names the playbook whose syntax fails.
syntax: $(STAMP) ## ansible-playbook --syntax-check on every playbook
	@echo ">> syntax check: $(words $(PLAYBOOKS)) playbooks"
	@$(BIN)/ansible-playbook --syntax-check -i inventory/example/hosts.yml $(PLAYBOOKS) >/dev/null

# promtool and amtool, for the watch rules' tests (tests/unit/watch): unpacked
# from Debian's own packages into .cache, so that nothing is installed on this
# machine and no service starts here. The lab's hosts install the same
# packages for real (roles/fleet_watch).
WATCH_TOOLS := .cache/watch-tools
PROMTOOL := $(WATCH_TOOLS)/usr/bin/promtool
WATCH_DEBS := prometheus prometheus-alertmanager
$(PROMTOOL):
	@echo ">> promtool and amtool from Debian's $(WATCH_DEBS) packages, into $(WATCH_TOOLS)"
	@rm -rf $(WATCH_TOOLS) && mkdir -p $(WATCH_TOOLS)/debs
	@cd $(WATCH_TOOLS)/debs && { apt-get download -q $(WATCH_DEBS) >/dev/null 2>&1 \
	  || { apt-get update -q >/dev/null && apt-get download -q $(WATCH_DEBS) >/dev/null; }; }
	@for deb in $(WATCH_TOOLS)/debs/*.deb; do dpkg-deb -x "$$deb" $(WATCH_TOOLS); done
	@$(PROMTOOL) --version | head -n1

watch-tools: $(PROMTOOL) ## promtool and amtool (the watch rules' tests), from Debian's packages into .cache

# One worker a core (pytest-xdist): the tests share no state but free ports
# and tmp_path, and assert_linear compares times within one worker.
unit: $(STAMP) $(PROMTOOL) ## pytest: module_utils, modules, filters, docs
	@echo ">> pytest"
	$(BIN)/python -m pytest -q -n auto tests/unit

# The lab's build (apt, debootstrap, the wheelhouse, the model's venv: mostly
# waiting on the network and the disk) runs in the background while lint,
# syntax and the unit tests use the CPUs; lab-e2e then finds it current.
LAB_BUILD_LOG := .cache/lab-build.log
test: $(STAMP) $(PROMTOOL) ## Everything CI runs: lint, syntax, unit tests (the lab builds meanwhile), then the lab end to end
	@mkdir -p .cache
	@echo ">> lab build in the background (log: $(LAB_BUILD_LOG))"
	@start=$$SECONDS; \
	  { $(MAKE) --no-print-directory lab-deps lab-build >$(LAB_BUILD_LOG) 2>&1 & }; build=$$!; \
	  rc=0; $(MAKE) --no-print-directory lint syntax unit || rc=$$?; \
	  if wait $$build; then \
	    echo ">> lab build (in the background) done; $$((SECONDS - start)) s since the start of lint"; \
	  else \
	    tail -n 40 $(LAB_BUILD_LOG); echo ">> the lab build failed: the whole log is $(LAB_BUILD_LOG)"; exit 1; \
	  fi; \
	  exit $$rc
	@$(MAKE) --no-print-directory lab-e2e

# The lab end to end: build (artefacts are reused), fresh hosts, every
# integration test, and teardown even when a test fails. The files run in a
# day's order: the hosts, then site.yml from bare hosts, then the serving modes,
# then every role's molecule scenario on the hosts those left converged, then
# the upgrades under load (down a version, a bad candidate rolled back, up
# again), then the rolling restarts under load (ending as two one-host engines), then a down
# worker and the mp backend, then the diagnosis (back to Ray), which leaves the
# engine with the field's small pool, then power cuts, then the security sweep.
LAB_TESTS := tests/integration/test_lab_hosts.py tests/integration/test_site.py tests/integration/test_serving_modes.py \
             tests/integration/test_molecule.py tests/integration/test_watch.py tests/integration/test_upgrade.py tests/integration/test_heal.py \
             tests/integration/test_restart.py \
             tests/integration/test_backends.py \
             tests/integration/test_diagnose.py tests/integration/test_power_cuts.py \
             tests/integration/test_security.py
lab-e2e: $(STAMP) lab-deps ## The lab end to end: fresh hosts, every integration test and molecule scenario, teardown
	@echo ">> lab end to end (tests/integration): fresh hosts, then site.yml and friends"
	@$(LAB_SH) down >/dev/null
	@rc=0; start=$$SECONDS; \
	  { $(MAKE) --no-print-directory lab-up && \
	    echo ">> lab build and up took $$((SECONDS - start)) s" && \
	    VLLM_FLEET_LAB=1 $(BIN)/python -m pytest -q $(LAB_TESTS); } || rc=$$?; \
	  $(LAB_SH) down || true; \
	  echo ">> lab end to end took $$(((SECONDS - start) / 60)) min (phase times above)"; \
	  exit $$rc

molecule: $(STAMP) lab-deps lab-up ## Every role's molecule scenario on the lab (left up; `make lab-down` after)
	VLLM_FLEET_LAB=1 $(BIN)/python -m pytest -q tests/integration/test_molecule.py

demo: $(STAMP) lab-deps lab-up ## Build the lab, run site.yml on it, print the report
	$(BIN)/ansible-playbook -i inventory/lab site.yml

bench: $(STAMP) ## Benchmarks (not part of test); see docs/benchmarks.md
	$(BIN)/python bench/kv_cache_parse.py
	$(BIN)/python bench/hostile_parse.py
	$(BIN)/python bench/gate_overhead.py

clean: ## Remove the venv and caches
	rm -rf $(VENV) .pytest_cache .cache
