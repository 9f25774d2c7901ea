# `make demo` and `make test` work on a fresh machine: each sets everything up first.
SHELL := /bin/bash
ENV := source scripts/local_env.sh &&

.PHONY: setup demo test unit-test job-test integration-test lint clean bench

setup:
	bash scripts/setup.sh

## Run the daily-orders example DAG on local Spark with a local Hadoop warehouse, then show the table.
demo: setup
	$(ENV) rm -rf "$$ICEBERG_DEMO_WAREHOUSE" && airflow dags test iceberg_daily_orders 2024-01-02
	$(ENV) python scripts/show_table.py "$$ICEBERG_DEMO_WAREHOUSE" db.orders && python scripts/show_table.py "$$ICEBERG_DEMO_WAREHOUSE" db.orders_before_correction

## Every test: unit (Airflow side), job (PySpark side, shared SparkSession), integration (real everything).
test: setup
	$(ENV) pytest -q tests/unit tests/integration tests/servers
	$(ENV) .spark-venv/bin/python -m pytest -q -p no:cacheprovider tests/jobs

unit-test: setup
	$(ENV) pytest -q tests/unit

job-test: setup
	$(ENV) .spark-venv/bin/python -m pytest -q -p no:cacheprovider tests/jobs

integration-test: setup
	$(ENV) pytest -q -m integration tests/integration tests/servers

## Benchmarks (about 15 min): overhead, parse cost, throughput, history growth; writes benchmarks/RESULTS.md.
bench: setup
	$(ENV) python -m benchmarks.run

lint: setup
	$(ENV) ruff check airflow_iceberg dags tests scripts benchmarks

clean:
	rm -rf .venv .spark-venv .cache .airflow .spark-conf warehouse
