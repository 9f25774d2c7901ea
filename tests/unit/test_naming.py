"""The one normaliser behind asset URIs and OpenLineage names, against OpenLineage's own examples.

The location examples are those of OpenLineage's naming spec and of openlineage-spark's
``FilesystemDatasetUtils`` tests (``FilesystemDatasetUtilsTestFor{Local,S3,GCS,ABFSS,WASBS,HDFS,
DBFS}``), so a table is named here as Spark's own OpenLineage listener names it. Where this
project goes further (host case, default ports, URI lists), the test says so.
"""

from __future__ import annotations

import pytest

from airflow_iceberg.naming import (
    catalog_location_dataset,
    hive_namespace,
    location_dataset,
    normalize_location,
    normalize_uri,
    table_location_dataset,
)

ABFSS = "abfss://container@account.dfs.core.windows.net"


@pytest.mark.parametrize(
    ("location", "dataset"),
    [
        # Local file system: namespace "file", the path as name, leading slash kept
        ("file:/warehouse/location", ("file", "/warehouse/location")),
        ("file:/warehouse/location/", ("file", "/warehouse/location")),
        ("file:///warehouse/location", ("file", "/warehouse/location")),
        ("/warehouse/location", ("file", "/warehouse/location")),
        ("/", ("file", "/")),
        ("warehouse/location", ("file", "warehouse/location")),
        # S3: s3a and s3n are s3; the object key has no leading slash
        ("s3://bucket", ("s3://bucket", "/")),
        ("s3://bucket/warehouse/location/", ("s3://bucket", "warehouse/location")),
        ("s3a://bucket/warehouse/location/", ("s3://bucket", "warehouse/location")),
        ("s3n://bucket/warehouse/location/", ("s3://bucket", "warehouse/location")),
        ("gs://bucket/warehouse/location", ("gs://bucket", "warehouse/location")),
        # ADLS Gen2 and Blob storage: the container stays; abfs is abfss, wasb is wasbs
        (ABFSS, (ABFSS, "/")),
        (f"{ABFSS}/warehouse/location/", (ABFSS, "warehouse/location")),
        ("abfs://container@account.dfs.core.windows.net/warehouse", (ABFSS, "warehouse")),
        ("wasbs://container@bucket/warehouse/location", ("wasbs://container@bucket", "warehouse/location")),
        ("wasb://container@bucket/warehouse", ("wasbs://container@bucket", "warehouse")),
        # HDFS: hdfs://{namenode host}:{namenode port}, the path with its leading slash
        ("hdfs://namenode:8020", ("hdfs://namenode:8020", "/")),
        ("hdfs://namenode:8020/warehouse", ("hdfs://namenode:8020", "/warehouse")),
        ("hdfs://namenode:8020/warehouse/location/", ("hdfs://namenode:8020", "/warehouse/location")),
        # DBFS: a file system without hosts
        ("dbfs:/warehouse/location/", ("dbfs", "/warehouse/location")),
        ("dbfs:///warehouse/location", ("dbfs", "/warehouse/location")),
    ],
)
def test_a_location_is_named_as_openlineage_spark_names_it(location, dataset):
    assert location_dataset(location) == dataset


@pytest.mark.parametrize(
    ("location", "namespace"),
    [
        ("/warehouse", "file:/warehouse"),
        ("file:///warehouse/location/", "file:/warehouse/location"),
        ("/", "file"),
        ("s3a://bucket/warehouse/location", "s3://bucket/warehouse/location"),
        ("gs://bucket/warehouse", "gs://bucket/warehouse"),
        (f"{ABFSS}/warehouse", f"{ABFSS}/warehouse"),
        ("wasb://container@bucket/warehouse", "wasbs://container@bucket/warehouse"),
        ("hdfs://namenode:8020/warehouse", "hdfs://namenode:8020/warehouse"),
        ("dbfs:/warehouse/location", "dbfs:/warehouse/location"),
    ],
)
def test_a_catalog_table_is_named_under_its_warehouse_as_openlineage_spark_names_it(location, namespace):
    assert catalog_location_dataset(location, "default.table") == (namespace, "default.table")


@pytest.mark.parametrize(
    ("spellings", "dataset"),
    [
        # beyond openlineage-spark, which copies the authority as written: the spec names the
        # namenode by host and port, so the host is lower-cased and the default port made explicit
        (("hdfs://NameNode/wh/db/t", "hdfs://namenode:8020/wh/db/t/", "hdfs://namenode:8020//wh//db/t"),
         ("hdfs://namenode:8020", "/wh/db/t")),
        # an account is a DNS name; a container is not user info, and two containers are two stores
        ((f"{ABFSS}/wh", "abfs://container@ACCOUNT.dfs.core.windows.net/wh/"), (ABFSS, "wh")),
        # credentials in a location never reach a name; a bucket keeps its case
        (("s3a://KEY:secret@Legacy-Bucket/wh", "s3://Legacy-Bucket/wh/"), ("s3://Legacy-Bucket", "wh")),
    ],
)  # fmt: skip
def test_every_spelling_of_a_location_has_one_name(spellings, dataset):
    assert {location_dataset(spelling) for spelling in spellings} == {dataset}
    assert len({normalize_location(spelling) for spelling in spellings}) == 1


def test_two_containers_of_one_account_are_two_locations():
    one = normalize_location("abfss://one@account.dfs.core.windows.net/wh")
    two = normalize_location("abfss://two@account.dfs.core.windows.net/wh")
    assert one != two and location_dataset(one)[0] != location_dataset(two)[0]


def test_a_tables_name_under_a_warehouse_is_joined_after_parsing():
    # a table named 'a#b?' is a directory of that name, not a fragment or a query
    assert table_location_dataset("file:/wh/", ["db", "a#b?"]) == ("file", "/wh/db/a#b?")
    assert table_location_dataset("s3a://bucket", ["db", "t"]) == ("s3://bucket", "db/t")
    assert table_location_dataset("hdfs://nn/wh", ["db", "t"]) == ("hdfs://nn:8020", "/wh/db/t")


@pytest.mark.parametrize(
    ("spellings", "canonical"),
    [
        # a Hive metastore list is one catalog whatever its order, spacing, case and default ports
        (
            (
                "thrift://a:9083,thrift://b:9083",
                "thrift://b:9083, thrift://a:9083",
                "thrift://B , thrift://a:9083/",
                "thrift://a,thrift://b,thrift://a:9083",
            ),
            "thrift://a:9083,thrift://b:9083",
        ),
        (("thrift://Metastore", "thrift://metastore:9083/"), "thrift://metastore:9083"),
        (
            ("https://Catalog.example.com/api/catalog/", "https://catalog.example.com:443/api/catalog?x=1"),
            "https://catalog.example.com:443/api/catalog",
        ),
        (
            ("jdbc:postgresql://DB/iceberg?user=u&password=p", "jdbc:postgresql://db:5432/iceberg"),
            "jdbc:postgresql://db:5432/iceberg",
        ),
        # a multi-host JDBC URL is one database, whatever the hosts' order
        (
            ("jdbc:postgresql://b:5433,a/iceberg", "jdbc:postgresql://a:5432,b:5433/iceberg"),
            "jdbc:postgresql://a:5432,b:5433/iceberg",
        ),
        (
            (
                "jdbc:sqlite:/data/cat.db",
                "jdbc:sqlite:file:/data/cat.db",
                "jdbc:sqlite:file:///data/cat.db?mode=ro",
            ),
            "jdbc:sqlite:/data/cat.db",
        ),
        (
            (
                "jdbc:sqlserver://db;databaseName=x;password=p",
                "jdbc:sqlserver://DB:1433;user=u;databaseName=x",
            ),
            "jdbc:sqlserver://db:1433;databaseName=x",
        ),
        (("thrift://[::1]", "thrift://[::1]:9083"), "thrift://[::1]:9083"),
    ],
)
def test_every_spelling_of_a_service_uri_has_one_form(spellings, canonical):
    assert {normalize_uri(spelling) for spelling in spellings} == {canonical}


def test_hive_metastores_are_named_hive_host_port():
    # OpenLineage's Hive namespace is hive://{host}:{port}, so the default port is made explicit
    assert hive_namespace("thrift://Metastore") == "hive://metastore:9083"
    assert hive_namespace("thrift://b:9083, thrift://a:9083") == "hive://a:9083"


def test_a_port_that_is_not_a_number_is_refused_with_the_uri_as_written():
    with pytest.raises(ValueError, match=r"the port 'x' in 'thrift://ms:x' is not a number"):
        normalize_uri("thrift://ms:x")
