"""The entry point, in-process: argv in, result file out, and the caller's session left running."""

from __future__ import annotations

import json

import pytest

from airflow_iceberg.jobs import iceberg_job
from airflow_iceberg.jobs.spec.errors import InvalidSpecError
from airflow_iceberg.jobs.spec.reads import ReadSpec
from airflow_iceberg.jobs.spec.request import JobRequest
from airflow_iceberg.jobs.spec.sources import Source
from airflow_iceberg.jobs.spec.writes import WriteSpec
from tests.jobs.helpers import values_query


def _argv(spec, result_file, **request):
    return JobRequest(spec=spec.validated(), result_file=str(result_file), **request).to_argv()


def test_main_writes_the_result_file_and_leaves_the_shared_session_running(spark, lake, table, tmp_path):
    result_file = tmp_path / "result.json"
    spec = WriteSpec(table, "create", Source(query=values_query([(1, "a"), (2, "b")], "id, name")))

    assert (
        iceberg_job.main(
            _argv(spec, result_file, commit_id="c-42", commit_properties={"airflow.run-id": "r"})
        )
        == 0
    )

    result = json.loads(result_file.read_text())
    summary = lake.summary(table)
    assert result["status"] == "success"
    assert result["snapshot_id"] == lake.current_snapshot_id(table)
    assert (summary["airflow-iceberg.commit-id"], summary["airflow.run-id"]) == ("c-42", "r")
    assert spark.sql("SELECT 1 AS one").collect()[0].one == 1  # main did not stop a session it did not start


def test_main_reads_with_the_new_incremental_flags(spark, lake, table, tmp_path):
    iceberg_job.main(_argv(WriteSpec(table, "create", Source(query="SELECT 1 AS id")), tmp_path / "a.json"))
    start = lake.current_snapshot_id(table)
    iceberg_job.main(_argv(WriteSpec(table, "append", Source(query="SELECT 2 AS id")), tmp_path / "b.json"))

    argv = [
        "--result-file",
        str(tmp_path / "r.json"),
        "read",
        "--table",
        table,
        "--start-snapshot-id",
        str(start),
        "--preview-rows",
        "5",
    ]
    assert iceberg_job.main(argv) == 0

    result = json.loads((tmp_path / "r.json").read_text())
    assert result["preview"] == [{"id": 2}]
    assert result["end_snapshot_id"] == lake.current_snapshot_id(table)


def test_an_expected_failure_returns_1_and_reports_it(spark, lake, table, tmp_path, capsys):
    result_file = tmp_path / "result.json"
    spec = WriteSpec(table, "append", Source(query="SELECT 1 AS id"))

    assert iceberg_job.main(_argv(spec, result_file)) == 1

    result = json.loads(result_file.read_text())
    assert result == {
        "status": "failed",
        "error": f"TableNotFoundError: table {table} does not exist; create it first "
        "(IcebergCreateTableOperator, mode 'create')",
    }
    assert result["error"] in capsys.readouterr().err
    assert not lake.exists(table)


def test_a_spark_failure_is_reported_by_its_java_cause_then_raised(spark, lake, table, tmp_path):
    iceberg_job.main(
        _argv(WriteSpec(table, "create", Source(query="SELECT 1 AS id, 'a' AS part")), tmp_path / "c")
    )
    before = lake.state(table)
    result_file = tmp_path / "result.json"
    spec = WriteSpec(table, "append", Source(query="SELECT 'not a number' AS id, 'a' AS part"))

    with pytest.raises(Exception, match=r"Cannot safely cast `id` \"STRING\" to \"INT\""):
        iceberg_job.main(_argv(spec, result_file))

    error = json.loads(result_file.read_text())["error"]
    assert error.startswith("AnalysisException: [INCOMPATIBLE_DATA_FOR_TABLE.CANNOT_SAFELY_CAST]")
    assert lake.state(table) == before


def test_catalog_secrets_from_the_secrets_file_configure_a_catalog(spark, lake, tmp_path):
    """Spark builds catalogs lazily from session conf, so conf set by the job before use takes effect."""
    warehouse = tmp_path / "vault-warehouse"
    secrets = tmp_path / "secret-conf.json"
    secrets.write_text(
        json.dumps(
            {
                "spark.sql.catalog.vault": "org.apache.iceberg.spark.SparkCatalog",
                "spark.sql.catalog.vault.type": "hadoop",
                "spark.sql.catalog.vault.warehouse": str(warehouse),
            }
        )
    )
    spec = WriteSpec("vault.db.secret", "create", Source(query="SELECT 7 AS id"))

    assert iceberg_job.main(["--secret-conf-file", str(secrets), *_argv(spec, tmp_path / "r.json")]) == 0

    assert list((warehouse / "db" / "secret" / "metadata").glob("v*.metadata.json"))
    assert lake.exists("lake.db.secret") is False


def test_apply_secret_conf_returns_keys_and_never_echoes_values(spark, tmp_path):
    assert iceberg_job.apply_secret_conf(spark, None) == []
    secrets = tmp_path / "secrets.json"
    secrets.write_text(json.dumps({"spark.x.b": "2", "spark.x.a": "1"}))
    assert iceberg_job.apply_secret_conf(spark, str(secrets)) == ["spark.x.a", "spark.x.b"]
    assert spark.conf.get("spark.x.a") == "1"
    for raw in ("not json SENTINEL", '["SENTINEL"]'):
        secrets.write_text(raw)
        with pytest.raises(InvalidSpecError, match="must be a JSON object") as raised:
            iceberg_job.apply_secret_conf(spark, str(secrets))
        assert "SENTINEL" not in str(raised.value)
    with pytest.raises(InvalidSpecError, match="does not exist on the driver"):
        iceberg_job.apply_secret_conf(spark, str(tmp_path / "gone.json"))


def test_invalid_argv_fails_before_any_spark_work(tmp_path):
    with pytest.raises(InvalidSpecError, match="identifier"):
        iceberg_job.main(["--result-file", str(tmp_path / "r.json"), "read", "--table", "db.t; DROP TABLE x"])
    assert not (tmp_path / "r.json").exists()


def test_read_spec_selector_names_the_kind_of_read():
    assert ReadSpec("lake.db.t", start_snapshot_id=1).validated().selector == "start_snapshot_id"
    assert ReadSpec("lake.db.t").validated().selector is None


def test_preview_rows_go_to_the_result_file_not_to_the_log(spark, table, tmp_path, capsys):
    """spark-submit's stdout becomes task-log lines; rows may hold personal data."""
    rows = values_query([(1, "alice@example.com"), (2, "bob@example.com")], "id, email")
    iceberg_job.main(_argv(WriteSpec(table, "create", Source(query=rows)), tmp_path / "w.json"))
    capsys.readouterr()
    result_file = tmp_path / "r.json"

    assert iceberg_job.main(_argv(ReadSpec(table, preview_rows=5), result_file)) == 0

    logged = capsys.readouterr().out
    assert "airflow-iceberg result:" in logged and '"row_count": 2' in logged
    assert "example.com" not in logged
    preview = json.loads(result_file.read_text())["preview"]
    assert sorted(row["email"] for row in preview) == ["alice@example.com", "bob@example.com"]
