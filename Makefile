# Two commands do everything on a fresh machine (Python 3.11+, Java 17):
#   make demo   -- venv, install, embedded broker, a short streaming job, a read-back summary
#   make test   -- the whole test suite (what CI runs)
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed

export PYSPARK_PYTHON := $(abspath $(PY))
export PYSPARK_DRIVER_PYTHON := $(abspath $(PY))

.PHONY: install test test-fast test-unit test-broker test-spark demo bench bench-quick soak wheels clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e ".[dev]"
	touch $(STAMP)

install: $(STAMP)

test: $(STAMP)
	$(PY) -m pytest -q -ra --durations=30 tests

# Every test that needs no Spark (pure tests and tests against the real broker): run it every few minutes
test-fast: $(STAMP)
	$(PY) -m pytest -q -ra -m "not spark" tests

test-unit: $(STAMP)
	$(PY) -m pytest -q -ra tests/unit

test-broker: $(STAMP)
	$(PY) -m pytest -q -ra tests/broker

test-spark: $(STAMP)
	$(PY) -m pytest -q -ra tests/spark

demo: $(STAMP)
	$(PY) jobs/demo.py --conf conf/demo.json

# Benchmarks (not in CI): results in bench/results/, report in docs/PERFORMANCE.md
bench: $(STAMP)
	$(PY) bench/run.py

bench-quick: $(STAMP)
	$(PY) bench/run.py --quick

# A bounded, seeded soak run with random faults (not in CI); SEED=n replays a run
SEED ?= 1
soak: $(STAMP)
	$(PY) -m tests.programs.soak --minutes 3 --seed $(SEED)

# manylinux2014 wheels (x86_64, aarch64) with the native extension, into dist/, without Docker:
# zig cross-compiles it, auditwheel checks it; the tools go to build/wheelenv (devtools/build_wheels.sh)
wheels: $(STAMP)
	TOOLPY=$(abspath $(PY)) devtools/build_wheels.sh

clean:
	rm -rf $(VENV) .demo .pytest_cache build *.egg-info
