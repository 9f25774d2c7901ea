"""Where the pyiceberg ref-step path must not go, and what it must not clobber (found in a hostile review).

A format-version 3 table (pyiceberg 0.12 does not write v3 metadata) and a Hive table that Hive
itself reads (``engine.hive.enabled``: pyiceberg rewrites the storage descriptor) keep the Spark
path, on every catalog; ``engine="pyiceberg"`` refuses them before anything changes.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from airflow_iceberg.exceptions import InvalidSpecError
from airflow_iceberg.operators import IcebergPublishOperator, IcebergTagOperator
from tests.unit.test_metadata_steps import TABLE, _context, _the_spark_job, lake  # noqa: F401

V3_METADATA = Path(__file__).parent / "data" / "v3_spark.metadata.json"


def _register_v3(lake, tmp_path) -> None:  # noqa: F811
    """A format-version 3 table as Iceberg 1.12's Spark wrote it (row lineage, table and partition stats)."""
    target = tmp_path / "v3" / "metadata" / "00000-spark.metadata.json"
    target.parent.mkdir(parents=True)
    shutil.copy(V3_METADATA, target)
    lake.register_table(TABLE, target.as_uri())


def test_auto_on_a_format_v3_table_runs_the_spark_job(lake, tmp_path):  # noqa: F811
    """Promised: where pyiceberg cannot be exact, engine='auto' runs the Spark job (and logs why)."""
    _register_v3(lake, tmp_path)
    ran: list[str] = []
    with _the_spark_job(ran):
        IcebergPublishOperator(task_id="publish", table=TABLE, branch="audit").execute(_context("publish"))
    assert ran == ["publish"]


def test_pyiceberg_engine_on_a_format_v3_table_refuses_before_anything_changes(lake, tmp_path):  # noqa: F811
    """Promised: engine='pyiceberg' refuses with InvalidSpecError where it cannot be exact."""
    _register_v3(lake, tmp_path)
    with pytest.raises(InvalidSpecError):
        IcebergTagOperator(task_id="tag", table=TABLE, tag="t1", engine="pyiceberg").execute(_context("tag"))


def test_a_rest_catalog_keeps_the_spark_path_for_a_format_v3_table(lake, tmp_path):  # noqa: F811
    """Over REST too: the step's own reads serialise the table's metadata, which pyiceberg cannot for v3."""
    from airflow_iceberg.catalog.config import CatalogConfig
    from airflow_iceberg.catalog.pyiceberg_path import table_refusal

    _register_v3(lake, tmp_path)
    loaded = lake.load_table(TABLE)
    refused = table_refusal(CatalogConfig(catalog_type="rest", uri="http://r"), loaded)
    assert refused is not None and "format-version 3" in refused


def test_a_hive_table_hive_reads_keeps_the_spark_path(lake):  # noqa: F811
    """pyiceberg 0.12's Hive catalog writes FileInputFormat/LazySimpleSerDe on every commit; Java's
    keeps HiveIcebergInputFormat/SerDe for ``engine.hive.enabled`` tables, or Hive cannot read them."""
    from airflow_iceberg.catalog.config import CatalogConfig
    from airflow_iceberg.catalog.pyiceberg_path import table_refusal
    from tests.unit.test_metadata_steps import _audited_branch

    _audited_branch(lake)
    table = lake.load_table(TABLE)
    with table.transaction() as transaction:
        transaction.set_properties({"engine.hive.enabled": "true"})
    config = CatalogConfig(catalog_type="hive", uri="thrift://127.0.0.1:9083", warehouse="file:///w")
    refused = table_refusal(config, lake.load_table(TABLE))
    assert refused is not None and "engine.hive.enabled" in refused


def test_a_retention_change_on_main_between_the_decision_and_the_commit_is_not_clobbered(
    lake, monkeypatch  # noqa: F811
):
    """Promised: a concurrent commit on a ref the decision read is never clobbered.

    Another writer sets main's retention (ALTER TABLE … REPLACE BRANCH main … RETAIN / Java's
    ``manageSnapshots().setMaxRefAgeMs``) after the decision. main's snapshot is unchanged, so
    ``assert-ref-snapshot-id`` holds. A ``set-snapshot-ref`` built from the decision's metadata
    would write main's *old* retention back (found in review); the SQL catalog's swap fails on the
    changed metadata, and the try after it builds the ref on the new one."""
    from pyiceberg.table.update import AssertRefSnapshotId, SetSnapshotRefUpdate

    from airflow_iceberg.catalog import pyiceberg_publish
    from tests.unit.test_metadata_steps import _audited_branch

    main, audited = _audited_branch(lake)
    decide = pyiceberg_publish.decide

    def decide_then_another_writer_sets_mains_retention(history, spec):
        decision = decide(history, spec)
        table = lake.load_table(TABLE)
        lake.commit_table(
            table,
            (AssertRefSnapshotId(ref="main", snapshot_id=main),),
            (SetSnapshotRefUpdate(ref_name="main", snapshot_id=main, type="branch", max_ref_age_ms=123456789,
                                  min_snapshots_to_keep=7),),
        )
        assert lake.load_table(TABLE).refs()["main"].min_snapshots_to_keep == 7
        return decision

    monkeypatch.setattr(pyiceberg_publish, "decide", decide_then_another_writer_sets_mains_retention)
    IcebergPublishOperator(
        task_id="publish", table=TABLE, branch="audit", expected_snapshot_id=str(audited)
    ).execute(_context("publish"))
    ref = lake.load_table(TABLE).refs()["main"]
    assert ref.snapshot_id == audited
    assert (ref.min_snapshots_to_keep, ref.max_ref_age_ms) == (7, 123456789), ref


def _set_mains_retention(lake, main: int) -> None:  # noqa: F811
    """Another writer's ``ALTER TABLE … REPLACE BRANCH main … RETAIN``: main's snapshot stays."""
    from pyiceberg.table.update import AssertRefSnapshotId, SetSnapshotRefUpdate

    lake.commit_table(
        lake.load_table(TABLE),
        (AssertRefSnapshotId(ref="main", snapshot_id=main),),
        (SetSnapshotRefUpdate(ref_name="main", snapshot_id=main, type="branch", max_ref_age_ms=987654321,
                              min_snapshots_to_keep=3),),
    )


def test_a_retention_change_on_main_just_before_a_rollbacks_swap_is_kept(lake, monkeypatch):  # noqa: F811
    """Promised: the rollback moves main's snapshot and keeps main's retention as it is at the swap.

    The other writer commits inside the SQL catalog's ``commit_table``, just before it loads the
    table it swaps: the rollback's ``set-snapshot-ref`` was built on the metadata before it."""
    from pyiceberg.catalog.sql import SqlCatalog
    from pyiceberg.table.update import SetSnapshotRefUpdate

    from airflow_iceberg.operators import IcebergRollbackOperator
    from tests.unit.test_metadata_steps import _audited_branch

    main, audited = _audited_branch(lake)
    IcebergPublishOperator(
        task_id="publish", table=TABLE, branch="audit", expected_snapshot_id=str(audited)
    ).execute(_context("publish"))
    commit_table = SqlCatalog.commit_table
    interfered: list[bool] = []

    def another_writer_first(catalog, table, requirements, updates):
        moves_main = any(isinstance(u, SetSnapshotRefUpdate) and u.ref_name == "main" for u in updates)
        if moves_main and not interfered:
            interfered.append(True)
            _set_mains_retention(lake, audited)
        return commit_table(catalog, table, requirements, updates)

    monkeypatch.setattr(SqlCatalog, "commit_table", another_writer_first)
    IcebergRollbackOperator(task_id="rollback", table=TABLE, snapshot_id=main).execute(_context("rollback"))
    ref = lake.load_table(TABLE).refs()["main"]
    assert interfered and (ref.snapshot_id, ref.min_snapshots_to_keep, ref.max_ref_age_ms) == (
        main, 3, 987654321
    ), ref


def test_the_whole_ref_requirement_fails_on_any_field_and_holds_when_nothing_changed(lake):  # noqa: F811
    """The requirement the SQL, Hive and Glue swaps check: a retention change alone fails it."""
    from pyiceberg.exceptions import CommitFailedException

    from airflow_iceberg.catalog.ref_requirement import AssertRefUnchanged
    from tests.unit.test_metadata_steps import _audited_branch

    main, _ = _audited_branch(lake)
    before = lake.load_table(TABLE).metadata
    requirement = AssertRefUnchanged(ref="main", expected=before.refs["main"])
    requirement.validate(before)
    AssertRefUnchanged(ref="absent").validate(before)
    _set_mains_retention(lake, main)
    with pytest.raises(CommitFailedException, match="ref main changed"):
        requirement.validate(lake.load_table(TABLE).metadata)
    with pytest.raises(CommitFailedException, match="ref main changed"):
        AssertRefUnchanged(ref="main").validate(before)
