"""A Kubernetes secret mounted into the driver pod, read as Kubernetes lays it out."""

from __future__ import annotations

import os
import re

import pytest

from airflow_iceberg.jobs.secret_mounts import SPARK_DEFAULT_REDACTION, read_secret_mounts, redacting
from airflow_iceberg.jobs.spec.errors import InvalidSpecError
from airflow_iceberg.jobs.spec.request import JobRequest, parse_argv
from airflow_iceberg.jobs.spec.sources import Source
from airflow_iceberg.jobs.spec.writes import WriteSpec


def _mounted_secret(directory, values: dict[str, str]) -> str:
    """The kubelet's layout: values in a timestamped folder, ``..data`` pointing at it, a link per key."""
    stamped = directory / "..2026_12_02_00_00_00.000000001"
    stamped.mkdir(parents=True)
    for key, value in values.items():
        (stamped / key).write_text(value)
    os.symlink(stamped.name, directory / "..data")
    for key in values:
        os.symlink(f"..data/{key}", directory / key)
    return str(directory)


def test_keys_are_catalog_properties_or_spark_settings(tmp_path):
    mount = _mounted_secret(
        tmp_path / "lake",
        {
            "credential": "client:SENTINEL\n",
            "spark.hadoop.fs.s3a.secret.key": "SENTINEL-s3a",
            "jdbc.password": "pw",
        },
    )
    assert read_secret_mounts({"lake": mount}) == {
        "spark.sql.catalog.lake.credential": "client:SENTINEL",
        "spark.hadoop.fs.s3a.secret.key": "SENTINEL-s3a",
        "spark.sql.catalog.lake.jdbc.password": "pw",
    }


def test_a_secret_that_is_not_mounted_fails_naming_the_catalog(tmp_path):
    with pytest.raises(InvalidSpecError, match="Kubernetes secret of catalog lake is not mounted"):
        read_secret_mounts({"lake": str(tmp_path / "missing")})


def _java(pattern: str) -> str:
    """Java takes ``(?i)`` inside a group as applying from there on; Python 3.11 spells it ``(?i:``."""
    return pattern.replace("(?:(?i)", "(?i:")


def test_the_keys_read_are_redacted_beside_what_was_redacted_before():
    pattern = _java(redacting("(?i)mycompany[.]apikey", ["spark.sql.catalog.lake.credential"]))
    assert re.search(pattern, "spark.sql.catalog.lake.credential")
    assert re.search(pattern, "spark.mycompany.apikey")  # the deployment's own, kept
    assert not re.search(pattern, "spark.sql.catalog.lake.uri")
    assert not re.search(pattern, "spark.sql.catalog.lakeXcredential")  # '.' is literal
    assert redacting(None, []) == SPARK_DEFAULT_REDACTION
    assert re.search(_java(redacting(None, ["spark.x.cred"])), "spark.y.password")  # Spark's default kept


def test_mount_paths_travel_in_argv_and_back():
    request = JobRequest(
        spec=WriteSpec("lake.db.t", "append", source=Source(query="SELECT 1")),
        secret_mounts={"lake": "/opt/airflow-iceberg/secrets/lake"},
    )
    assert parse_argv(request.to_argv()).secret_mounts == {"lake": "/opt/airflow-iceberg/secrets/lake"}
