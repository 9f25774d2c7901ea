"""Measure one parse-time cost in this (fresh) interpreter and print it as JSON.

    python -m benchmarks.parse_probe import MODULE [LOADED...]  # time `import MODULE` after LOADED
    python -m benchmarks.parse_probe dagbag FOLDER              # time DagBag(FOLDER) after importing DagBag

Run once per measurement in a new process, so nothing is cached from an earlier one. Also
reports which of tests/heavy_modules.py's HEAVY got imported (the apache-spark provider's
spark-submit modules, Kubernetes, the OpenLineage listener, pyspark, pyiceberg): our operators and
DAG files must never load them while parsing.
"""

from __future__ import annotations

import importlib
import json
import sys
import time

from tests.heavy_modules import loaded


def heavy_modules() -> list[str]:
    return loaded()


def time_import(module: str, loaded: list[str]) -> dict:
    """Time importing ``module`` alone: what is in ``loaded`` is imported first, untimed."""
    for name in loaded:
        importlib.import_module(name)
    started = time.perf_counter()
    importlib.import_module(module)
    return {"seconds": time.perf_counter() - started}


def time_dagbag(folder: str) -> dict:
    from airflow.dag_processing.dagbag import DagBag

    started = time.perf_counter()
    bag = DagBag(dag_folder=folder)
    elapsed = time.perf_counter() - started
    return {
        "seconds": elapsed,
        "dags": sorted(bag.dag_ids),
        "errors": {str(path): str(error) for path, error in bag.import_errors.items()},
    }


def main(kind: str, target: str, *loaded: str) -> None:
    measured = time_import(target, list(loaded)) if kind == "import" else time_dagbag(target)
    print(json.dumps({**measured, "heavy_modules": heavy_modules()}))


if __name__ == "__main__":
    main(*sys.argv[1:])
