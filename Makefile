# Set-up and entry points. `make demo` and `make test` are the README's two commands.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin

.PHONY: demo test bench calibrate clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip

# Install gpufleet and run the main job on the embedded catalog (no cloud account needed).
demo: $(BIN)/python
	$(BIN)/python -m pip install -q .
	$(BIN)/gpufleet compare resnet50 --epochs 90 --top 12
	$(BIN)/gpufleet compare llm-7b --tokens 1e11 --gpu H100,A100-80GB,A100-40GB --nodes 1,2,4 --top 12

# Install gpufleet (editable) with its test dependencies and run the whole test suite.
test: $(BIN)/python
	$(BIN)/python -m pip install -q -e '.[test]'
	$(BIN)/python -m pytest -q -rs

bench: $(BIN)/python
	$(BIN)/python tests/bench/bench_cli.py
	$(BIN)/python tests/bench/bench_plan.py

# Re-fit the performance model to perf/data/measurements.csv and print the per-row error.
calibrate: $(BIN)/python
	$(BIN)/python -m gpufleet.perf.calibration --write

clean:
	rm -rf $(VENV) build dist *.egg-info
