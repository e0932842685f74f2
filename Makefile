# Two commands do everything on a fresh machine (Python 3.11+, Java 17, Maven):
#   make demo   -- venv, install, Apache Kafka's jars (once), a broker, a short streaming job, a read-back summary
#   make test   -- the whole test suite on Apache Kafka (what CI runs)
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed

export PYSPARK_PYTHON := $(abspath $(PY))
export PYSPARK_DRIVER_PYTHON := $(abspath $(PY))

.PHONY: install jars kafka lint test test-fast test-unit test-broker test-spark test-compat test-wheels demo bench bench-quick soak wheels clean

# --no-compile: each module is compiled when first imported, not all of PySpark's, pandas' and numpy's up front
# (the install takes 32 s instead of 55 here)
$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet --no-compile -e ".[dev]"
	touch $(STAMP)

install: $(STAMP)

# Java checked; Apache Kafka's jars and Spark's Kafka connector fetched from Maven Central once, into
# ~/.cache/spark-recoverable-sink (RKS_KAFKA_CACHE), and reused offline afterwards (devtools/fetch_jars.py)
jars: $(STAMP)
	$(PY) -m devtools.fetch_jars

# One broker on 127.0.0.1:29092 for the README's quickstart, until Ctrl-C (devtools/local_kafka.py)
kafka: $(STAMP) jars
	$(PY) -m devtools.local_kafka

# The package's own code against ruff's rules and mypy (pyproject.toml); the tests and tools are not held to them yet
lint: $(STAMP)
	$(PY) -m ruff check spark_recoverable_sink
	$(PY) -m mypy spark_recoverable_sink

# On two pytest-xdist workers: the tests using the session's SparkSession on one of them, each other Spark
# release's compatibility tests as one group (its application runs once, from its cached venv with this tree's
# wheel installed), every other test on whichever is free (tests/conftest.py); then the tests marked `alone`
# (wall-clock premises) by themselves, after `make lint`. The distributions' build-and-install checks are `make test-wheels`.
test: $(STAMP) jars lint
	$(PY) -m pytest -q -ra --durations=30 -n 2 --dist loadgroup -m "not alone and not wheels" tests
	$(PY) -m pytest -q -ra --durations=30 -m "alone and not compat and not wheels" tests

# Every test that needs no Spark (pure tests and tests against the real broker): run it every few minutes
test-fast: $(STAMP) jars
	$(PY) -m pytest -q -ra -m "not spark" tests

test-unit: $(STAMP)
	$(PY) -m pytest -q -ra tests/unit

test-broker: $(STAMP) jars
	$(PY) -m pytest -q -ra tests/broker

test-spark: $(STAMP) jars
	$(PY) -m pytest -q -ra tests/spark

# The compatibility tier: the headline scenarios on every other Spark release of
# devtools/sparkversions.py, each from its own venv (built once into ~/.cache/spark-recoverable-sink) with the
# wheel of this tree installed
test-compat: $(STAMP) jars
	$(PY) -m pytest -q -ra -n 2 --dist loadgroup -m compat tests

# The built distributions (sdist, wheel, manylinux) installed in clean venvs and writing (tests/spark/test_wheel.py)
test-wheels: $(STAMP) jars
	$(PY) -m pytest -q -ra -m wheels tests

demo: $(STAMP) jars
	$(PY) templates/demo.py --conf conf/demo.json

# Benchmarks (not in CI): one results file in bench/results/ (commit it in place of the run before), report in
# docs/PERFORMANCE.md; bench/explained.md is written by hand after each run
bench: $(STAMP) jars
	$(PY) bench/run.py

bench-quick: $(STAMP) jars
	$(PY) bench/run.py --quick

# A bounded, seeded soak run with random faults (not in CI); SEED=n replays a run
SEED ?= 1
soak: $(STAMP) jars
	$(PY) -m tests.programs.soak --minutes 3 --seed $(SEED)

# manylinux2014 wheels (x86_64, aarch64) with the native extension, into dist/, without Docker:
# zig cross-compiles it, auditwheel checks it; the tools go to build/wheelenv (devtools/build_wheels.sh)
wheels: $(STAMP)
	TOOLPY=$(abspath $(PY)) devtools/build_wheels.sh

clean:
	rm -rf $(VENV) .demo .pytest_cache build *.egg-info
