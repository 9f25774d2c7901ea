"""The pyiceberg ref-step path across retries and clears, and the clients it connects with (third review).

Each test was first a reproduction that failed (on ba36d32); its docstring says what was
promised, what broke, and how. Nothing here starts Spark: the Spark path is recorded
(``_the_spark_job``, or ``_run_spark_job`` replaced), never run.
"""

# ruff: noqa: F811 (the ``lake`` fixture is imported from test_metadata_steps)

from __future__ import annotations

import contextlib
import datetime as dt
import importlib.util

import pytest

from airflow_iceberg.catalog.config import CatalogConfig
from airflow_iceberg.catalog.pyiceberg_path import catalog_refusal
from airflow_iceberg.catalog.pyiceberg_tables import pyiceberg_properties
from airflow_iceberg.exceptions import IcebergJobError, InvalidSpecError
from airflow_iceberg.operators import IcebergTagOperator
from tests.unit.test_metadata_steps import (  # noqa: F401
    TABLE,
    _append,
    _audited_branch,
    _context,
    _refs,
    _the_spark_job,
    lake,
)
from tests.unit.test_metadata_steps_exactness import _on_the_cluster, _Store

# ------------------------------------------------- 3. the CREATE OR REPLACE TAG pin


def test_or_replace_tag_keeps_a_move_made_after_the_decision_when_a_marker_was_committed_first(
    lake, monkeypatch
):
    """Promised (pyiceberg_refs.py:136-139): "OR REPLACE: it must be where the decision saw it (a swap,
    no clobber). Pinned here, not per try".

    Broke: ``create_tag`` pins ``(self._last or self.read())``. With no ``snapshot_id`` the tag names
    main's head, which ``tag_with`` first records in a marker tag (``record_snapshot`` ->
    ``refs.create_tag`` -> ``commit``), and ``commit`` sets ``self._last = None``
    (pyiceberg_refs.py:211). The tag's own ``create_tag`` then *re-reads* the table
    (pyiceberg_refs.py:139) and pins the tag as it is after the marker commit, not as the decision
    saw it. Another writer's move of ``eod`` between the decision (``refs.history()`` in
    ``tag_with``) and that re-read is taken as "what the decision saw" and silently overwritten.
    This is the default way to use the operator (tag main's head, idempotent=True).
    Fix: pin the ref in ``tag_with``'s decision (pass ``history.refs.get(tag)`` into ``create_tag``),
    or keep the decision's metadata in ``PyicebergTableRefs`` apart from ``_last``.
    """
    from airflow_iceberg.jobs import branches

    main, _ = _audited_branch(lake)
    lake.load_table(TABLE).manage_snapshots().create_tag(main, "eod").commit()
    head = _append(lake)  # main moves on: today's eod is to name it (OR REPLACE)
    later = _append(lake, branch="audit")  # the snapshot another writer tags eod with
    tag_with = branches.tag_with
    moved: list[bool] = []

    def another_writer_moves_the_tag_after_the_decision(refs, spec, marker_id):
        history = refs.history

        def read_then_move():
            read = history()
            if not moved:
                lake.load_table(TABLE).manage_snapshots().remove_tag("eod").create_tag(later, "eod").commit()
                moved.append(True)
            return read

        refs.history = read_then_move
        return tag_with(refs, spec, marker_id)

    monkeypatch.setattr(branches, "tag_with", another_writer_moves_the_tag_after_the_decision)
    with contextlib.suppress(IcebergJobError):  # failing, as a pinned requirement does, is a right answer
        IcebergTagOperator(task_id="t", table=TABLE, tag="eod", replace=True).execute(_context("t"))
    assert moved
    eod = _refs(lake)["eod"]
    assert eod == later, f"the other writer's eod={later} was overwritten with {eod} (main's head {head})"


# ------------------------------------------------- 2. exactly once: which tries keep Spark


@pytest.mark.parametrize("engine", ["auto", "pyiceberg"])
def test_a_cleared_task_is_not_held_on_the_spark_path_by_its_earlier_runs_finished_durable_job(
    lake, monkeypatch, engine
):
    """Promised (metadata_steps.py:97-106): a retry keeps the Spark path because "an earlier try of *its
    commit id* may still run Spark work".

    Broke: ``_earlier_tries_spark_work`` (metadata_steps.py:109-114) refuses whenever
    ``task_state_store`` holds ``external_id_key``. Neither the provider (``ResumableJobMixin`` never
    deletes it on success) nor Airflow (``[state_store] clear_on_success`` off by default) removes
    it, as cluster_mode.py:206-215 (``forget_another_commits_job``) itself says. So once a task
    instance ran its Spark job in cluster mode with ``durable`` (engine='spark', a worker without
    pyiceberg, a table that then needed Spark), every later *clear* of it -- a new commit id, whose
    stored job is another commit's finished one -- is held on the Spark path for good
    (engine='auto': a spark-submit for a millisecond commit), and engine='pyiceberg' refuses with
    InvalidSpecError on every clear although nothing of this commit id ever ran.
    Fix: refuse only when ``store.get(SUBMITTED_FOR_KEY)`` is this try's commit id
    (``_cluster_commit_id``), as ``_forget_another_commits_job`` decides "a retry" vs "a clear".
    """
    from airflow_iceberg.operators.cluster_mode import SUBMITTED_FOR_KEY

    main, _ = _audited_branch(lake)
    op = IcebergTagOperator(task_id="tag", table=TABLE, tag="eod", snapshot_id=main, retries=1, engine=engine)
    op.durable = True
    first = _context("tag")
    first["ti"].try_number, first["ti"].max_tries = 1, 1  # the first run: try 1, one retry allowed
    earlier_commit = op._commit_id(first)
    cleared = _context("tag")
    cleared["ti"].try_number, cleared["ti"].max_tries = 3, 3  # cleared after 2 tries: a new generation
    assert op._commit_id(cleared) != earlier_commit
    cleared["task_state_store"] = _Store(
        {SUBMITTED_FOR_KEY: earlier_commit, op.external_id_key: "application_1700000000000_0001"}
    )
    spark: list[str] = []

    def spark_job(self, context, spec, settings, configs, over_connect, on_cluster):
        spark.append(spec.table)
        return {"status": "success", "table": spec.table}

    _on_the_cluster(monkeypatch, spark_job)
    op.execute(cleared)
    assert spark == [], "the clear ran the Spark job because of another commit id's finished application"
    assert _refs(lake)["eod"] == main


def test_engine_pyiceberg_over_spark_connect_can_be_retried(lake):
    """Promised (docs/operators.md, metadata_steps.py:14-16): engine='pyiceberg' runs in the worker, and
    refuses only "where it cannot be exact".

    Broke: over Spark Connect ``_earlier_tries_spark_work`` refuses every try after the first of a
    commit id (metadata_steps.py:115-120), whichever path the earlier tries took. With
    engine='pyiceberg' no earlier try ran any Connect operation (that engine never takes the Spark
    path), yet every retry -- after a transient catalog outage, or a CommitFailedException from a
    concurrent writer -- fails with InvalidSpecError: retries of such a task can never succeed.
    (engine='auto' likewise pays a Connect session for every retry of a worker-path try.)
    Fix: know whether an earlier try started Spark work -- e.g. record in the task state store
    (or the marker) that the Spark path started, before it starts -- instead of inferring it from
    the try number.
    """
    op = IcebergTagOperator(task_id="tag", table=TABLE, tag="eod", retries=2, engine="pyiceberg")
    main, _ = _audited_branch(lake)
    op.snapshot_id = main
    spec = op.build_spec().validated()
    settings = op.catalog_settings()
    spec = op.qualify_spec(spec, settings.catalog_names).validated()
    configs = {hook.catalog_config.catalog_name: hook.catalog_config for hook in op.catalog_hooks}
    context = _context("tag")
    context["ti"].try_number, context["ti"].max_tries = 2, 2  # Airflow's retry of try 1 (which ran here)
    try:
        result = op.run_in_worker(context, spec, configs, over_connect=True)
    except InvalidSpecError as error:
        pytest.fail(f"engine='pyiceberg' refused a retry no Spark work preceded: {error}")
    assert result is not None and _refs(lake)["eod"] == main


# --------------------------------------------------------------------------- 4. the clock check


def test_the_clock_check_is_made_on_the_metadata_the_catalog_swaps_not_on_an_earlier_read(lake, monkeypatch):
    """Promised (pyiceberg_path.py:193-200, pyiceberg_refs.py:195-196): the worker never writes metadata
    whose log runs backwards by more than a minute (Java's ``TableMetadata`` constructor then refuses
    to load it: "Invalid update timestamp ...: before the latest metadata log entry timestamp").

    Broke: ``commit`` checks ``clock_refusal(current.metadata)`` on the loop's own read, but
    pyiceberg's SqlCatalog (and HiveCatalog) ``commit_table`` loads the table *again* and applies the
    updates to that metadata (the swap's base). A commit landing in between that none of the
    requirements names (a property change, an append to another branch, main itself for a tag)
    by a writer whose clock is > 1 min ahead of the worker's passes every requirement; the worker
    then writes ``last-updated-ms`` = its now, below the metadata log's last entry (the other
    writer's stamp) by minutes: a metadata file no Spark job can load. Java's writer would refuse
    in its own ``Builder.build()``.
    Fix: make the clock check a requirement (like ``AssertRefUnchanged``) that the catalog
    validates on the metadata it swaps.
    """
    import pyiceberg.table.update as pyiceberg_update
    from pyiceberg.catalog.sql import SqlCatalog
    from pyiceberg.table.update import SetPropertiesUpdate

    from airflow_iceberg.catalog.pyiceberg_refs import PyicebergTableRefs

    main, _ = _audited_branch(lake)
    refs = PyicebergTableRefs(TABLE, lambda: lake.load_table(TABLE))
    refs.history()  # the worker's read (its clock check passes on it)
    original = SqlCatalog.commit_table
    raced: list[bool] = []

    class AheadClock(dt.datetime):  # the other writer's clock, 5 minutes ahead of the worker's
        @classmethod
        def now(cls, tz=None):
            return dt.datetime.now(tz) + dt.timedelta(minutes=5)

    def another_writer_commits_first(self, table, requirements, updates):
        if not raced:
            raced.append(True)
            monkeypatch.setattr(pyiceberg_update, "datetime", AheadClock)
            try:
                other = lake.load_table(TABLE)
                original(lake, other, (), (SetPropertiesUpdate(updates={"owner": "etl"}),))
            finally:
                monkeypatch.setattr(pyiceberg_update, "datetime", dt.datetime)
        return original(self, table, requirements, updates)

    monkeypatch.setattr(SqlCatalog, "commit_table", another_writer_commits_first)
    with contextlib.suppress(ValueError):  # refusing ("Nothing was changed") is the right answer
        refs.create_tag("eod", main, replace=False, retain=None)
    assert raced
    metadata = lake.load_table(TABLE).metadata
    previous = metadata.metadata_log[-1].timestamp_ms
    assert metadata.last_updated_ms - previous >= -60_000, (
        f"the worker wrote last-updated-ms {metadata.last_updated_ms}, "
        f"{(previous - metadata.last_updated_ms) / 1000:.0f} s before the metadata log's last entry: "
        "Java's TableMetadata refuses to load this file"
    )


# --------------------------------------------------------------------------- 1. regressions: path choice


def test_the_worker_connects_as_the_user_pgjdbc_connects_as():
    """Promised (pyiceberg_tables.py:111-112): driver properties "the URL's own win, as pgjdbc lets them";
    and JDBC commits are "the same commit ... in the same rows" as the same database user.

    Broke: ``sqlalchemy_url`` takes ``user = login or jdbc.property("user")``
    (pyiceberg_tables.py:124): the connection's Login (which Iceberg gives pgjdbc as ``jdbc.user``)
    beats a ``user=`` in the JDBC URL. pgjdbc's ``Driver.parseURL(url, info)`` lets the URL's
    ``user`` override the ``info`` properties, so the Spark job connects as ``bob`` and the worker
    as ``alice`` -- another identity (other grants, another search_path default, row-level
    security), and ``catalog_refusal`` lets it through.
    Fix: ``user = jdbc.property("user") or login`` after merging the driver properties (URL last),
    or refuse a URL user that disagrees with the login.
    """
    config = CatalogConfig(
        catalog_name="pg",
        catalog_type="jdbc",
        uri="jdbc:postgresql://db.example:5432/catalog?user=bob",
        warehouse="s3://bucket/warehouse",
        login="alice",
        password="pw",
    ).validate()
    if catalog_refusal(config, None, over_connect=False) is not None:
        return  # keeping the Spark path is a right answer
    url = pyiceberg_properties(config)["uri"]
    assert url.startswith("postgresql+psycopg2://bob:"), url.replace("pw", "***")


@pytest.mark.skipif(importlib.util.find_spec("puresasl") is not None, reason="this worker has pure-sasl")
def test_a_kerberized_metastore_on_a_worker_without_sasl_runs_the_spark_job(
    iceberg_connection, spark_connection, monkeypatch
):
    """Promised (metadata_steps.py:52-55, pyiceberg_path.py:129-134): engine='auto' falls back to the
    Spark job where the worker cannot do it; ``missing_client`` names the modules a catalog needs.

    Broke: with ``hive.kerberos-authentication=true`` (pyiceberg's own setting, which a deployment
    sets so the snapshot sensor reaches a SASL metastore) pyiceberg's Hive client opens a thrift
    ``TSaslClientTransport``, which imports ``puresasl`` (pyiceberg's ``hive-kerberos`` extra; the
    ``catalog-check`` extra installs ``hive`` only). ``missing_client`` checks ``hive_metastore``
    and ``thrift`` only (pyiceberg_path.py:136-138), so the path is chosen, ``load()`` raises
    ImportError, and ``_pyiceberg_refs`` turns it into a failed task (metadata_steps.py:151-152)
    instead of running the Spark job, whose Kerberos comes from hive-site.xml.
    Fix: ``missing_client`` adds ``puresasl`` (and ``thrift_sasl`` where used) when
    ``hive.kerberos-authentication`` is true.
    """
    iceberg_connection(
        host="thrift://127.0.0.1:1",
        extra={
            "catalog_name": "hv",
            "catalog_type": "hive",
            "warehouse": "file:///tmp/warehouse",
            "catalog_properties": {"hive.kerberos-authentication": "true"},
        },
    )
    ran: list[str] = []
    with _the_spark_job(ran):
        try:
            IcebergTagOperator(task_id="tag", table="db.orders", tag="eod").execute(_context("tag"))
        except IcebergJobError as error:
            pytest.fail(f"the task failed instead of running the Spark job: {error}")
    assert ran == ["tag"]


@pytest.mark.parametrize(
    "line",
    [
        "spark.hadoop.yarn.timeline-service.enabled false",  # in EMR's own spark-defaults.conf
        "spark.hadoop.mapreduce.fileoutputcommitter.algorithm.version 2",
    ],
)
def test_a_hadoop_setting_no_catalog_client_reads_does_not_cost_the_worker_path(lake, tmp_path, line):
    """Asked: does a legitimate, common setup now lose the pyiceberg path?

    Broke (availability, since 11bf60b): ``catalog_refusal`` refuses any ``spark.hadoop.*`` key
    (pyiceberg_path.py:122-125), and the operator now hands it the deployment's whole properties
    file (``_submit_properties``, metadata_steps.py:134). Managed clusters' spark-defaults.conf
    carry ``spark.hadoop.*`` lines that configure YARN or MapReduce, which neither Iceberg's
    FileIO nor its catalog clients read; every JDBC and Hive ref step there now runs as a Spark
    job, and engine='pyiceberg' refuses. Fix: refuse only the Hadoop settings a catalog's client
    or HadoopFileIO reads (``fs.*``, ``hive.*``, ``hadoop.security.*``/``hadoop.rpc.*``, core-site
    keys), or only when the table's FileIO is HadoopFileIO.
    """
    properties = tmp_path / "spark-defaults.conf"
    properties.write_text(line + "\n")
    main, _ = _audited_branch(lake)
    ran: list[str] = []
    with _the_spark_job(ran):
        IcebergTagOperator(
            task_id="tag", table=TABLE, tag="t", snapshot_id=main, properties_file=str(properties)
        ).execute(_context("tag"))
    assert ran == [] and _refs(lake)["t"] == main
