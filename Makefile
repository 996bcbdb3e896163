# Set-up and entry points. `make demo` and `make test` are the README's two commands.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
# Salt gets a virtualenv of its own: salt 3008.3 and pulumi pin conflicting `packaging` versions
SALT_VENV := .salt-venv
SALT_VERSION := 3008.3
# Microsoft's Blob storage emulator, for the object-store tests (npm; into .azurite/, not global)
AZURITE_VERSION := 3.37.0
AZURITE := .azurite/node_modules/.bin/azurite-blob
# what the local test rack (tests/rack/rack.py) needs from the system, the browser the report test
# opens its HTML in (Debian's chromium, driven by Playwright without a browser download), and the
# PostgreSQL server the team-store tests start a cluster of their own with, and promtool (Debian ships it in
# prometheus) that checks the rendered Prometheus configs and runs the alert rules' unit tests
SYSTEM_TOOLS := /usr/sbin/sshd /usr/sbin/debootstrap /usr/sbin/ip /usr/sbin/iptables /usr/bin/chromium /usr/bin/pg_createcluster /usr/bin/promtool /usr/bin/amtool
# the versions the tests run against (pyproject keeps ranges for users; tests/unit/test_constraints.py
# checks each pin is inside its range)
PINS := -c tests/constraints.txt
# setuptools warns at length that the Salt state folders (package data under gpufleet/states)
# look like packages; the wheel test checks they ship. Quiet that during our own installs.
QUIET_BUILD := PYTHONWARNINGS=ignore::UserWarning

.PHONY: demo test test-fast lint bench calibrate clean salt sysdeps rack-down azurite

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip

# Install gpufleet and run the main job on the embedded catalog (no cloud account needed).
demo: $(BIN)/python
	$(QUIET_BUILD) $(BIN)/python -m pip install -q $(PINS) .
	$(BIN)/gpufleet compare resnet50 --epochs 90 --top 12
	$(BIN)/gpufleet compare llm-7b --tokens 1e11 --gpu H100,A100-80GB,A100-40GB --nodes 1,2,4 --top 12

# Install gpufleet (editable) with its test dependencies at their tested versions, Salt, the test
# rack's system tools, check the floor plan and the linter, and run the whole test suite: the
# end-to-end modules run on two local racks side by side (tests/rack/rack.py, GPUFLEET_RACK_ID 0 and
# 1), each rack's modules one after the other in one process (xdist_group "rack0", "rack1": see
# tests/integration/localrack.py), while the unit tests and the installed-wheel test fill the rest.
# One process per core and one more: a rack's process waits on its hosts most of the time (on 2
# cores, the two racks' hosts and processes keep about one core busy). The slowest tests are listed
# at the end, so that a run shows where its time went.
test: $(BIN)/python salt sysdeps azurite
	$(QUIET_BUILD) $(BIN)/python -m pip install -q $(PINS) -e '.[test]'
	$(MAKE) --no-print-directory lint
	$(BIN)/python -m pytest -q -rfEs -n $$(($$(nproc) + 1)) --dist loadgroup --durations=20

# The developers' loop: the same tests but those marked `slow` (the rack's end-to-end modules, the
# wheel builds, failover's `up` runs, the team store's concurrent writers, the model fits), without
# the lint and the pip run: gpufleet and its test dependencies are installed only when missing.
test-fast: $(BIN)/python salt azurite
	@$(BIN)/python -c "import gpufleet.cli.app, moto, xdist" 2>/dev/null || $(QUIET_BUILD) $(BIN)/python -m pip install -q $(PINS) -e '.[test]'
	$(BIN)/python -m pytest -q -rs -n auto -m "not slow"

# The import contracts (pyproject.toml [tool.importlinter]) and ruff. import-linter reads one
# package tree, and gpufleet is two folders (infra/ and cli/): it reads a tree of links to them.
LINT_TREE := build/lint
lint: $(BIN)/python
	@rm -rf $(LINT_TREE) && mkdir -p $(LINT_TREE)/gpufleet
	@for f in infra/*; do ln -s ../../../$$f $(LINT_TREE)/gpufleet/; done; ln -s ../../../cli $(LINT_TREE)/gpufleet/cli
	cd $(LINT_TREE) && PYTHONPATH=.:../../tests/tools ../../$(BIN)/lint-imports --config ../../pyproject.toml --no-cache
	$(BIN)/ruff check infra cli tests

salt: $(SALT_VENV)/bin/salt-ssh

azurite: $(AZURITE)

$(AZURITE):
	@if command -v npm >/dev/null; then npm install --prefix .azurite --no-audit --no-fund --silent azurite@$(AZURITE_VERSION); \
	else echo "note: npm is missing: the Azurite tests skip (and fail under CI=true)"; fi

$(SALT_VENV)/bin/salt-ssh:
	$(PYTHON) -m venv $(SALT_VENV)
	$(SALT_VENV)/bin/python -m pip install -q --upgrade pip
	$(SALT_VENV)/bin/python -m pip install -q salt==$(SALT_VERSION)

# openssh-server, debootstrap, iproute2 and iptables for the test rack, chromium for the report's
# browser test, postgresql for the team store in a database, prometheus and prometheus-alertmanager for
# promtool and amtool (root only; without root those tests
# skip, and under CI=true they fail)
sysdeps:
	@missing=""; for t in $(SYSTEM_TOOLS); do [ -x $$t ] || missing="$$missing $$t"; done; \
	if [ -z "$$missing" ]; then exit 0; fi; \
	if [ "$$(id -u)" != 0 ]; then echo "note: missing$$missing; run 'sudo make sysdeps' for the rack tests"; exit 0; fi; \
	export DEBIAN_FRONTEND=noninteractive; \
	apt-get update -qq && apt-get install -y -qq --no-install-recommends openssh-server openssh-client debootstrap iproute2 iptables chromium fonts-dejavu-core postgresql prometheus prometheus-alertmanager >/dev/null

rack-down:
	$(PYTHON) tests/rack/rack.py down
	GPUFLEET_RACK_ID=1 $(PYTHON) tests/rack/rack.py down

bench: $(BIN)/python
	$(BIN)/python tests/bench/bench_cli.py
	$(BIN)/python tests/bench/bench_plan.py
	$(BIN)/python tests/bench/bench_reap.py
	$(BIN)/python tests/bench/bench_refresh.py
	$(BIN)/python tests/bench/bench_rack.py
	$(BIN)/python tests/bench/bench_heal_rack.py
	$(BIN)/python tests/bench/bench_cloud_wait.py
	$(BIN)/python tests/bench/bench_verify.py
	$(BIN)/python tests/bench/bench_failover.py
	$(BIN)/python tests/bench/bench_images.py
	$(BIN)/python tests/bench/bench_spend.py

# Re-fit the performance model to perf/data/measurements.csv and print the per-row error.
calibrate: $(BIN)/python
	$(BIN)/python -m gpufleet.perf.calibration --write

clean:
	rm -rf $(VENV) $(SALT_VENV) .azurite build dist *.egg-info
