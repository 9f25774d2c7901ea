"""Health-driven upkeep decisions, on real tables written by pyiceberg into a SQLite catalog.

The decisions mirror Iceberg's procedures (bin-pack planner, RemoveSnapshots), so each test builds
a table in the state the rule is about and checks the verdict and its reason. Position deletes
need Spark to write them: tests/jobs/test_upkeep.py has those cases, with the compaction itself.
"""

from __future__ import annotations

import time
from datetime import date

import pyarrow as pa
import pytest
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.partitioning import PartitionField, PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.transforms import IdentityTransform
from pyiceberg.types import DateType, LongType, NestedField

from airflow_iceberg.catalog.table_health import assess, expirable_snapshots, spark_filter_for_pyiceberg
from airflow_iceberg.exceptions import InvalidSpecError

SCHEMA = Schema(
    NestedField(1, "order_id", LongType(), required=False),
    NestedField(2, "order_date", DateType(), required=False),
)
#: Identity on the date (pyiceberg writes day() partitions only with pyiceberg-core, not installed).
SPEC = PartitionSpec(
    PartitionField(source_id=2, field_id=1000, transform=IdentityTransform(), name="order_date")
)
ARROW = pa.schema([("order_id", pa.int64()), ("order_date", pa.date32())])


@pytest.fixture
def orders(tmp_path):
    catalog = SqlCatalog(
        "health", uri=f"sqlite:///{tmp_path}/catalog.db", warehouse=f"file://{tmp_path}/warehouse"
    )
    catalog.create_namespace("db")
    return catalog.create_table("db.orders", schema=SCHEMA, partition_spec=SPEC)


def append(table, day: date, first_id: int, rows: int = 3) -> None:
    ids = list(range(first_id, first_id + rows))
    table.append(pa.table({"order_id": ids, "order_date": [day] * rows}, schema=ARROW))


DAY_ONE, DAY_TWO = date(2024, 1, 1), date(2024, 1, 2)


def test_a_partition_with_fewer_small_files_than_min_input_files_needs_no_compaction(orders):
    for n in range(4):
        append(orders, DAY_ONE, n * 10)
    orders.refresh()
    report = assess(orders, steps=["rewrite_data_files"])
    decision = report["steps"]["rewrite_data_files"]
    assert (decision["needed"], report["measured"]["data_files"], report["measured"]["small_data_files"]) == (
        False,
        4,
        4,
    )
    assert "bin-pack planner" in decision["reason"]


def test_min_input_files_small_files_in_one_partition_need_compaction_of_that_partition(orders):
    for n in range(5):
        append(orders, DAY_ONE, n * 10)
    append(orders, DAY_TWO, 100)
    orders.refresh()
    decision = assess(orders, steps=["rewrite_data_files"])["steps"]["rewrite_data_files"]
    assert decision["needed"] is True
    assert decision["partitions"] == {"order_date=2024-01-01": "5 files to rewrite (min-input-files 5)"}
    # The procedure's own option moves the bar, as it would for the procedure.
    lower = assess(orders, options={"min-input-files": 2}, steps=["rewrite_data_files"])
    assert lower["steps"]["rewrite_data_files"]["needed"] is True
    higher = assess(orders, options={"min-input-files": 6}, steps=["rewrite_data_files"])
    assert higher["steps"]["rewrite_data_files"]["needed"] is False


def test_two_files_larger_together_than_the_target_are_compacted_as_iceberg_would(orders):
    append(orders, DAY_ONE, 0)
    append(orders, DAY_ONE, 10)
    orders.refresh()
    size = max(task.file.file_size_in_bytes for task in orders.scan().plan_files())
    options = {
        "target-file-size-bytes": size + 1,
        "min-file-size-bytes": size + 1,
        "max-file-size-bytes": 10**9,
    }
    decision = assess(orders, options=options, steps=["rewrite_data_files"])["steps"]["rewrite_data_files"]
    assert decision["needed"] is True and "more than the target" in decision["reason"]


def test_where_scopes_the_files_judged_and_takes_sparks_date_literals(orders):
    for n in range(5):
        append(orders, DAY_ONE, n * 10)
    append(orders, DAY_TWO, 100)
    orders.refresh()
    recent = "order_date >= DATE'2024-01-02' AND order_date < DATE '2024-01-03'"
    assert spark_filter_for_pyiceberg(recent) == "order_date >= '2024-01-02' AND order_date < '2024-01-03'"
    report = assess(orders, where=recent, steps=["rewrite_data_files"])
    assert (report["steps"]["rewrite_data_files"]["needed"], report["measured"]["data_files"]) == (False, 1)
    with pytest.raises(InvalidSpecError, match="where 'no_such_column = 1' cannot be read"):
        assess(orders, where="no_such_column = 1", steps=["rewrite_data_files"])


def test_expiry_is_needed_only_for_snapshots_expire_snapshots_would_remove(orders):
    for n in range(4):
        append(orders, DAY_ONE, n * 10)
    orders.refresh()
    snapshots = orders.metadata.snapshots
    now_ms = int(time.time() * 1000) + 1000
    assert assess(orders, steps=["expire_snapshots"])["steps"]["expire_snapshots"]["needed"] is False  # young
    assert len(expirable_snapshots(orders, now_ms, retain_last=1)) == 3
    assert expirable_snapshots(orders, now_ms, retain_last=4) == []
    # A tag keeps its snapshot, as Iceberg's RemoveSnapshots does.
    orders.manage_snapshots().create_tag(snapshots[0].snapshot_id, "first").commit()
    orders.refresh()
    assert sorted(expirable_snapshots(orders, now_ms, retain_last=1)) == sorted(
        s.snapshot_id for s in snapshots[1:3]
    )
    report = assess(orders, older_than=now_ms, retain_last=1, steps=["expire_snapshots"])
    assert report["steps"]["expire_snapshots"] == {
        "needed": True,
        "reason": "2 of 4 snapshots would be expired",
    }


def test_manifests_are_rewritten_from_max_manifests_data_manifests(orders):
    for n in range(3):
        append(orders, DAY_ONE, n * 10)
    orders.refresh()
    report = assess(orders, max_manifests=3, steps=["rewrite_manifests"])
    assert (
        report["measured"]["data_manifests"] == 3 and report["steps"]["rewrite_manifests"]["needed"] is True
    )
    assert assess(orders, steps=["rewrite_manifests"])["steps"]["rewrite_manifests"]["needed"] is False


def test_a_branch_is_judged_at_its_own_head_and_an_unknown_branch_is_refused(orders):
    append(orders, DAY_ONE, 0)
    orders.refresh()
    orders.manage_snapshots().create_branch(orders.current_snapshot().snapshot_id, "audit").commit()
    for n in range(1, 5):
        append(orders, DAY_ONE, n * 10)  # main only
    orders.refresh()
    on_branch = assess(orders, branch="audit", steps=["rewrite_data_files"])
    assert (on_branch["snapshot_id"], on_branch["measured"]["data_files"]) == (
        orders.metadata.refs["audit"].snapshot_id,
        1,
    )
    assert assess(orders, steps=["rewrite_data_files"])["steps"]["rewrite_data_files"]["needed"] is True
    with pytest.raises(InvalidSpecError, match="branch 'nope' does not exist"):
        assess(orders, branch="nope")


def test_an_empty_table_needs_nothing_and_unknown_steps_or_bad_options_are_refused(orders):
    report = assess(orders)
    assert {step: d["needed"] for step, d in report["steps"].items()} == dict.fromkeys(
        ("rewrite_data_files", "rewrite_position_delete_files", "expire_snapshots", "rewrite_manifests"),
        False,
    )
    with pytest.raises(InvalidSpecError, match="unknown upkeep step"):
        assess(orders, steps=["vacuum"])
    append(orders, DAY_ONE, 0)
    orders.refresh()
    with pytest.raises(InvalidSpecError, match="option min-input-files must be a number"):
        assess(orders, options={"min-input-files": "many"}, steps=["rewrite_data_files"])


def test_the_operator_refuses_an_unknown_step_when_the_dag_is_parsed():
    from airflow_iceberg.operators.health import IcebergTableHealthOperator

    with pytest.raises(InvalidSpecError, match=r"steps: unknown upkeep step\(s\) \['compact'\]"):
        IcebergTableHealthOperator(task_id="health", table="db.t", steps={"compact": "x"})


def test_a_partition_is_packed_into_groups_judged_one_by_one_as_iceberg_packs_it():
    from airflow_iceberg.catalog.table_health import SizeRules

    sizes = [10] * 5
    whole = SizeRules.resolve({"target-file-size-bytes": 1000}, 512)
    assert whole.file_groups(sizes) == [sizes]
    by_bytes = SizeRules.resolve({"target-file-size-bytes": 1000, "max-file-group-size-bytes": 20}, 512)
    assert by_bytes.file_groups(sizes) == [[10, 10], [10, 10], [10]]
    # Iceberg 1.11's max-file-group-input-files caps a group's files as well.
    by_count = SizeRules.resolve({"target-file-size-bytes": 1000, "max-file-group-input-files": 3}, 512)
    assert by_count.file_groups(sizes) == [[10, 10, 10], [10, 10]]
