"""Bad input that only the table can reveal, through the real operator and a real spark-submit.

Everything the provider can check without the table is checked before Spark starts (see
``tests/unit/test_operators.py`` and ``test_job_spec.py``). What is left needs the catalog: does
the table exist, does the source fit its schema, is there such a snapshot. Each case here runs the
operator's ``execute`` in this process (as a worker does, minus the Airflow CLI) against a real
Hadoop warehouse, and asserts two things: the task fails with an :class:`IcebergJobError` whose
message names the problem, and the table is exactly as it was (same metadata version, same
current snapshot, no new files, no new table). pyiceberg, not the job, is the judge.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator

from airflow_iceberg.exceptions import IcebergJobError, InvalidSpecError
from airflow_iceberg.operators import (
    IcebergAppendOperator,
    IcebergCreateTableOperator,
    IcebergOverwriteOperator,
    IcebergTimeTravelReadOperator,
)
from scripts.show_table import load_table
from tests.integration.airflow_runner import hadoop_catalog_connection, spark_connection
from tests.integration.in_process import execute
from tests.integration.robustness_dags.iceberg_robustness import QUICK_START
from tests.integration.task_processes import data_files, metadata_version

ORDERS = "db.orders"
QUALIFIED = "demo.db.orders"
COLUMNS = "order_id, customer_id, amount, order_date"


def orders(extra: str = "") -> str:
    return (
        "SELECT id AS order_id, CAST(id % 17 AS INT) AS customer_id, "
        f"CAST(id AS DECIMAL(10, 2)) AS amount, DATE'2024-01-01' AS order_date{extra} FROM range(10)"
    )


@dataclass(frozen=True)
class BadInput:
    """One bad request: the operator, its arguments, and the message the task must fail with."""

    name: str
    operator: type
    kwargs: dict[str, Any]
    message: str  # a regular expression the IcebergJobError must match

    def build(self) -> Any:
        return self.operator(task_id=self.name, conf=QUICK_START, **self.kwargs)


BAD_INPUTS = [
    BadInput(
        "append_with_an_extra_column",
        IcebergAppendOperator,
        {"table": ORDERS, "source_query": orders(", 'SPRING' AS coupon")},
        rf"^{QUALIFIED}: SchemaMismatchError: source columns coupon are not in table {QUALIFIED} "
        rf"\(columns: {COLUMNS}\); set merge_schema=True",
    ),
    BadInput(
        "append_a_string_into_a_decimal",
        IcebergAppendOperator,
        {"table": ORDERS, "source_query": orders().replace("CAST(id AS DECIMAL(10, 2))", "'cheap'")},
        r"AnalysisException: \[INCOMPATIBLE_DATA_FOR_TABLE.CANNOT_SAFELY_CAST\] .*"
        r'Cannot safely cast `amount` "STRING" to "DECIMAL\(10,2\)"',
    ),
    BadInput(
        "partition_by_a_column_not_in_the_source",
        IcebergCreateTableOperator,
        {"table": "db.orders_by_region", "source_query": orders(), "partition_by": ["region"]},
        r"SchemaMismatchError: partition_by 'region' uses column 'region', which is not in the source",
    ),
    BadInput(
        "read_an_unknown_snapshot_id",
        IcebergTimeTravelReadOperator,
        {"table": ORDERS, "snapshot_id": "4242"},
        rf"SnapshotNotFoundError: snapshot_id 4242 is not a snapshot of table {QUALIFIED}$",
    ),
    BadInput(
        "read_as_of_a_time_before_the_first_snapshot",
        IcebergTimeTravelReadOperator,
        {"table": ORDERS, "as_of_timestamp": "2000-01-01T00:00:00+00:00"},
        r"SnapshotNotFoundError: as_of_timestamp 946684800000 \(2000-01-01T00:00:00\+00:00\) is before "
        rf"the first snapshot of table {QUALIFIED} \(\d+ = ",
    ),
    BadInput(
        "append_to_a_missing_table",
        IcebergAppendOperator,
        {"table": "db.no_such_orders", "source_query": orders()},
        r"TableNotFoundError: table demo.db.no_such_orders does not exist; create it first",
    ),
    BadInput(
        "create_a_table_that_exists",
        IcebergCreateTableOperator,
        {"table": ORDERS, "source_query": orders(), "mode": "create"},
        rf"TableAlreadyExistsError: table {QUALIFIED} already exists; use mode 'create_or_replace' or "
        "'replace'",
    ),
    BadInput(
        "validate_from_an_unknown_snapshot",
        IcebergOverwriteOperator,
        {
            "table": ORDERS,
            "source_query": orders(),
            "condition": "order_date = DATE'2024-01-01'",
            "write_options": {"isolation-level": "serializable", "validate-from-snapshot-id": "4242"},
        },
        rf"SnapshotNotFoundError: validate-from-snapshot-id 4242 is not a snapshot of table {QUALIFIED}$",
    ),
    BadInput(
        # Spark's lexer nests comments, the text check does not: only the job's parser check sees DELETE.
        "source_query_that_hides_a_delete_from_the_text_check",
        IcebergAppendOperator,
        {"table": ORDERS, "source_query": f"WITH x AS (SELECT 1) DELETE /* a /* b */ c */ FROM {QUALIFIED}"},
        rf"^{QUALIFIED}: InvalidSpecError: source query must be a query, but Spark reads it as "
        "DeleteFromTable, a statement that would change data; it was not run$",
    ),
]

#: Statements Spark's grammar accepts after a query's start; all refused before spark-submit starts.
#: (operator, argument, text); a condition's operator also gets a source, a filter's nothing else.
T = QUALIFIED
STATEMENTS = [
    (IcebergAppendOperator, "source_query", f"WITH x AS (SELECT 1) DELETE FROM {T} WHERE order_id > 3"),
    (
        IcebergAppendOperator,
        "source_query",
        f"WITH s AS ({orders()}) MERGE INTO {T} t USING s ON t.order_id = s.order_id "
        "WHEN MATCHED THEN DELETE",
    ),
    (IcebergAppendOperator, "source_query", f"FROM {T} INSERT OVERWRITE TABLE {T} SELECT *"),
    (IcebergAppendOperator, "source_query", f"WITH x AS ({orders()}) INSERT INTO {T} SELECT * FROM x"),
    (IcebergAppendOperator, "source_query", f"WITH x AS (SELECT 1) UPDATE {T} SET amount = 0"),
    (IcebergAppendOperator, "source_query", f"CACHE TABLE c AS SELECT * FROM {T}"),
    (IcebergAppendOperator, "source_query", "SET spark.sql.shuffle.partitions=1"),
    (IcebergAppendOperator, "source_query", "CREATE VIEW v AS WITH x AS (SELECT 1) SELECT * FROM x"),
    (IcebergOverwriteOperator, "condition", f"order_id IN (WITH x AS (SELECT 1) DELETE FROM {T})"),
    (IcebergTimeTravelReadOperator, "filter", f"EXISTS (FROM {T} INSERT INTO {T} SELECT *)"),
]


@dataclass
class Lake:
    warehouse: Path

    def table_dir(self, identifier: str) -> Path:
        return self.warehouse.joinpath(*identifier.split("."))

    def tables(self) -> list[str]:
        return sorted(p.parent.parent.name for p in self.warehouse.glob("*/*/metadata"))

    def state(self) -> dict[str, Any]:
        """Everything a failed task must leave alone, read from disk and by pyiceberg."""
        table_dir = self.table_dir(ORDERS)
        table = load_table(self.warehouse, ORDERS)
        return {
            "tables": self.tables(),
            "metadata_version": metadata_version(table_dir),
            "snapshot_id": table.current_snapshot().snapshot_id,
            "snapshots": [s.snapshot_id for s in table.snapshots()],
            "rows": table.scan().to_arrow().num_rows,
            "data_files": data_files(table_dir),
        }


@pytest.fixture(scope="module")
def lake(tmp_path_factory) -> Lake:
    warehouse = tmp_path_factory.mktemp("bad-input-warehouse")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("AIRFLOW_CONN_ICEBERG_CATALOG_DEFAULT", json.dumps(hadoop_catalog_connection(warehouse)))
        patch.setenv("AIRFLOW_CONN_SPARK_DEFAULT", json.dumps(spark_connection()))
        created = execute(
            IcebergCreateTableOperator(
                task_id="create_orders",
                table=ORDERS,
                source_query=orders(),
                partition_by=["days(order_date)"],
                conf=QUICK_START,
            )
        )
        assert created["total_records"] == 10
        yield Lake(warehouse)


@pytest.mark.parametrize("bad", BAD_INPUTS, ids=[b.name for b in BAD_INPUTS])
def test_bad_input_fails_clearly_and_changes_nothing(lake, bad):
    before = lake.state()

    with pytest.raises(IcebergJobError) as failure:
        execute(bad.build())

    message = str(failure.value)
    assert re.search(bad.message, message), message
    assert "\n" not in message, "the error is one line, not a stack trace"
    assert lake.state() == before


def test_statements_as_query_condition_or_filter_fail_before_spark_and_change_nothing(lake, monkeypatch):
    """The issue's reproducer and its variants: refused by the text check, so no spark-submit starts."""
    before = lake.state()
    monkeypatch.setattr(SparkSubmitOperator, "execute", _no_spark_submit)
    for number, (operator, argument, text) in enumerate(STATEMENTS):
        kwargs = {argument: text, **({"source_query": orders()} if argument == "condition" else {})}
        with pytest.raises(InvalidSpecError, match=r"a statement that changes data|must be a query"):
            execute(operator(task_id=f"statement_{number}", table=ORDERS, conf=QUICK_START, **kwargs))
    assert lake.state() == before


def _no_spark_submit(self, context):
    raise AssertionError("spark-submit must not start for a statement the text check refuses")


def test_serializable_isolation_alone_commits_when_nothing_conflicts(lake):
    """isolation-level alone validates from the snapshot current when the job started, not from the
    table's whole history (where the overwritten rows' own files would count as conflicts)."""
    before = lake.state()
    result = execute(
        IcebergOverwriteOperator(
            task_id="serializable_overwrite",
            table=ORDERS,
            condition="order_date = DATE'2024-01-01'",
            source_query=orders(),
            write_options={"isolation-level": "serializable"},
            conf=QUICK_START,
        )
    )
    after = lake.state()
    assert after["snapshots"] == [*before["snapshots"], result["snapshot_id"]]
    assert after["rows"] == before["rows"]
