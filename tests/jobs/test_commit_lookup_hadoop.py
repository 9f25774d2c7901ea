"""Cluster deploy mode on a Hadoop catalog: the commit is found where Iceberg's Hadoop catalog finds it."""

from __future__ import annotations

from airflow_iceberg.catalog.commit_lookup import committed_by
from airflow_iceberg.catalog.config import CatalogConfig
from airflow_iceberg.catalog.pyiceberg_tables import load_table
from airflow_iceberg.jobs.writes import write_table
from tests.jobs.helpers import CATALOG, values_query, write_spec

ROWS = values_query([(1, "ann", 10), (2, "bob", 20)], "id, name, score")
MORE = values_query([(3, "cid", 30)], "id, name, score")


def _hadoop(warehouse) -> CatalogConfig:
    return CatalogConfig(catalog_name=CATALOG, catalog_type="hadoop", warehouse=f"file://{warehouse}")


def test_a_commit_past_a_stale_version_hint_is_found(spark, lake, table, warehouse):
    """Iceberg's HadoopTableOperations commits by renaming ``vN.metadata.json`` into place, then
    rewrites ``version-hint.text``; a failed hint write is only logged (the commit stands), and a
    reader steps past the hint while ``v(N+1)`` exists. The worker's lookup read the hint's version
    only, and reported ``committed: false`` for a commit that was made."""
    write_table(spark, write_spec(table, "create", ROWS), commit_id="c-create")
    appended = write_table(spark, write_spec(table, "append", MORE), commit_id="c-append")
    hint = lake._metadata_dir(table) / "version-hint.text"
    version = int(hint.read_text().strip())
    hint.write_text(str(version - 1))  # the hint update after the rename failed
    assert spark.sql(f"SELECT count(*) FROM {table}").first()[0] == 3  # Iceberg's own reader: committed
    found = committed_by(load_table(_hadoop(warehouse), table), "c-append", "main")
    assert found["committed"] is True and found["snapshot_id"] == appended["snapshot_id"]


def test_a_commit_with_gzip_metadata_is_found(spark, lake, table, warehouse):
    """``write.metadata.compression-codec=gzip`` names the files ``vN.gz.metadata.json``."""
    properties = {"write.metadata.compression-codec": "gzip"}
    write_table(spark, write_spec(table, "create", ROWS, table_properties=properties), commit_id="c-create")
    appended = write_table(spark, write_spec(table, "append", MORE), commit_id="c-append")
    found = committed_by(load_table(_hadoop(warehouse), table), "c-append", "main")
    assert found["committed"] is True and found["snapshot_id"] == appended["snapshot_id"]
