"""The example DAGs parse the way Airflow's own examples must: no errors, no DB, no connections.

Parsing runs in a fresh interpreter so that what the DAG files import is measured alone: none of
``tests/heavy_modules.py``'s HEAVY (the apache-spark provider's spark-submit modules, the
Kubernetes client, the OpenLineage listener, pyspark, pyiceberg).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

DAGS = Path(__file__).resolve().parents[2] / "dags"

PARSE = r"""
import json, sys
from sqlalchemy import event
from sqlalchemy.engine import Engine

queries = []
event.listen(Engine, "before_cursor_execute", lambda conn, cursor, statement, *a: queries.append(statement))

lookups = []
from airflow.sdk.bases.hook import BaseHook
from airflow.sdk.definitions.connection import Connection

def record(*args, **kwargs):
    lookups.append(args[-1] if args else kwargs)
    raise AssertionError("connection looked up at parse time")

BaseHook.get_connection = classmethod(record)
Connection.get = classmethod(record)

from airflow.dag_processing.dagbag import DagBag
from tests.heavy_modules import loaded

bag = DagBag(dag_folder=sys.argv[1])
print(json.dumps({
    "errors": {str(k): str(v) for k, v in bag.import_errors.items()},
    "dags": sorted(bag.dag_ids),
    "tasks": {d: len(bag.dags[d].tasks) for d in bag.dag_ids},
    "queries": queries,
    "lookups": [str(x) for x in lookups],
    "heavy_modules": loaded(),
}))
"""


def _parse() -> dict:
    completed = subprocess.run(
        [sys.executable, "-c", PARSE, str(DAGS)],
        capture_output=True,
        text=True,
        check=True,
        timeout=300,
        cwd=DAGS.parent,
    )
    return json.loads(completed.stdout.strip().splitlines()[-1])


def test_example_dags_parse_cleanly_without_db_connections_or_heavy_imports():
    parsed = _parse()
    assert parsed["errors"] == {}
    assert "iceberg_daily_orders" in parsed["dags"]
    assert parsed["tasks"]["iceberg_daily_orders"] == 4
    assert parsed["tasks"]["iceberg_write_audit_publish"] == 7
    assert parsed["tasks"]["iceberg_maintenance_daily"] == 3
    assert parsed["tasks"]["iceberg_maintenance_weekly"] == 4
    assert parsed["queries"] == []
    assert parsed["lookups"] == []
    assert parsed["heavy_modules"] == []


def test_every_dag_file_defines_a_dag():
    parsed = _parse()
    assert len(parsed["dags"]) >= len([p for p in DAGS.glob("*.py") if not p.name.startswith("_")])
