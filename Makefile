# `make demo` and `make test` work on a fresh machine: each sets up what it needs first.
SHELL := /bin/bash
ENV := source scripts/local_env.sh &&
JOB_TESTS := -m pytest -q -p no:cacheprovider tests/jobs
# Two pytest-xdist workers, one test file each at a time: a file's module-scoped DAG runs and
# servers stay in one worker, and while one worker waits on a JVM or a server, the other works.
PARALLEL := -n 2 --dist loadfile --no-loadscope-reorder
# $(call line_tests,4.0): the job suite, and the example DAG end to end, with that Spark line as the
# worker's Spark (its spark-submit, SPARK_HOME and Iceberg runtime jar; see scripts/local_env.sh).
define line_tests
	export SPARK_LINE=$(1) && source scripts/local_env.sh && "$$SPARK_VENV/bin/python" $(JOB_TESTS)
	export SPARK_LINE=$(1) && source scripts/local_env.sh && \
	  pytest -q tests/integration/test_example_dag.py -k "not client_deploy_mode"
endef

.PHONY: setup setup-demo demo test spark4-test spark41-test unit-test job-test integration-test lint clean bench wheel

## Everything the tests need (the demo's part too); idempotent. See scripts/setup.sh.
setup:
	bash scripts/setup.sh

## Only what the demo runs: one Airflow environment, Spark 3.5 and its Iceberg runtime jar.
setup-demo:
	bash scripts/setup.sh demo

## Run the daily-orders example DAG on local Spark with a local Hadoop warehouse, then show the table.
demo: setup-demo
	$(ENV) rm -rf "$$ICEBERG_DEMO_WAREHOUSE" && airflow dags test iceberg_daily_orders 2024-01-02
	$(ENV) python scripts/show_table.py "$$ICEBERG_DEMO_WAREHOUSE" db.orders && python scripts/show_table.py "$$ICEBERG_DEMO_WAREHOUSE" db.orders_before_correction

## Every test: unit (Airflow side), job (PySpark side, shared SparkSession, on Spark 3.5 and 4.0),
## integration (real everything; the Spark Connect server on Spark 4.1), and the story DAGs over it
## (see scripts/run_tests.sh).
test: setup
	bash scripts/run_tests.sh

## The job suite and the example DAG end to end (real Airflow + Spark 4.0's spark-submit) on Spark 4.0.
spark4-test: setup
	$(call line_tests,4.0)

## The same on Spark 4.1 (Iceberg 1.12.0), not part of `make test` (whose Connect server runs 4.1).
spark41-test: setup
	$(call line_tests,4.1)

unit-test: setup
	$(ENV) pytest -q tests/unit

job-test: setup
	$(ENV) "$$SPARK_VENV/bin/python" $(JOB_TESTS)

integration-test: setup
	$(ENV) pytest -q $(PARALLEL) -m integration tests/integration tests/servers

## A wheel of the provider in dist/ (it is not on PyPI yet): pip install dist/airflow_iceberg-*.whl
DIST ?= dist
# (setuptools' build/ is removed first: a module deleted from the source would linger in it)
wheel: setup
	rm -rf build && .venv/bin/uv build --quiet --wheel --out-dir "$(DIST)" . && rm -rf build

## Benchmarks (2 to 2.5 hours on 2 quiet cores): overhead, parse cost, throughput, history growth, the
## story steps, Spark Connect mode, (#7, #8) the example DAGs and scale-out under a real scheduler, and
## (#9) publish and tag without Spark; writes benchmarks/RESULTS.md. See docs/benchmarks.md.
bench: setup
	$(ENV) python -m benchmarks.run

lint: setup
	$(ENV) ruff check airflow_iceberg dags tests scripts benchmarks

clean:
	rm -rf .venv .spark-venv .spark4-venv .spark41-venv .cache .airflow .spark-conf warehouse dist
