"""The one normaliser behind asset URIs and OpenLineage names, against OpenLineage's own examples.

The location examples are those of OpenLineage's naming spec and of openlineage-spark's
``FilesystemDatasetUtils`` tests (``FilesystemDatasetUtilsTestFor{Local,S3,GCS,ABFSS,WASBS,HDFS,
DBFS}``), so a table is named here as Spark's own OpenLineage listener names it. Where this
project goes further (host case, default ports, URI lists), the test says so.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

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


# --------------------------------------------------------------------------- JDBC URLs, as drivers read them


@pytest.mark.parametrize(
    ("spellings", "canonical"),
    [
        # pgjdbc's documented forms without hosts: localhost:5432
        (
            ("jdbc:postgresql:iceberg", "jdbc:postgresql:///iceberg", "jdbc:postgresql://LOCALHOST/iceberg"),
            "jdbc:postgresql://localhost:5432/iceberg",
        ),
        # a failover or load-balancing mode says how a client picks a host, not which database
        (
            (
                "jdbc:mysql:loadbalance://db-a:3306,db-b:3306/iceberg",
                "jdbc:mysql:replication://db-b,db-a/iceberg?user=u",
                "jdbc:mysql://address=(host=db-b)(port=3306)(type=replica),(host=db-a,port=3306)/iceberg",
                "jdbc:mysql://[db-a,db-b:3306]/iceberg",
            ),
            "jdbc:mysql://db-a:3306,db-b:3306/iceberg",
        ),
        (
            ("jdbc:mariadb:sequential://db-a,db-b/iceberg", "jdbc:mariadb:failover://db-b:3306,db-a/iceberg"),
            "jdbc:mariadb://db-a:3306,db-b:3306/iceberg",
        ),
        # the properties that choose the schema are the identity's; a search_path in options is one
        (
            (
                "jdbc:postgresql://db/iceberg?currentSchema=team_a&sslmode=require",
                "jdbc:postgresql://db:5432/iceberg?options=-c%20search_path%3Dteam_a&ApplicationName=x",
                "jdbc:postgresql://db/iceberg?options=-csearch_path=team_a",
            ),
            "jdbc:postgresql://db:5432/iceberg?currentSchema=team_a",
        ),
        # SQL Server: server, instance, port and database may be properties, in any case
        (
            (
                "jdbc:sqlserver://DB;DatabaseName=x;encrypt=true",
                "jdbc:sqlserver://;serverName=db;database=x",
                "jdbc:sqlserver://db:1433;databaseName=x;user=u",
            ),
            "jdbc:sqlserver://db:1433;databaseName=x",
        ),
        # a named instance is found through the SQL Browser: no default port
        (
            ("jdbc:sqlserver://db\\inst;databaseName=x", "jdbc:sqlserver://db;instanceName=inst;databaseName=x"),
            "jdbc:sqlserver://db\\inst;databaseName=x",
        ),
        # Oracle: EZConnect and the descriptor; thin or oci is the client, not the database
        (
            (
                "jdbc:oracle:thin:@//DB:1521/ORCL",
                "jdbc:oracle:thin:@db/ORCL",
                "jdbc:oracle:oci:@tcp://db:1521/ORCL",
                "jdbc:oracle:thin:@(DESCRIPTION=(ADDRESS=(PROTOCOL=TCP)(PORT=1521)(HOST=db))"
                "(CONNECT_DATA=(SERVICE_NAME=ORCL)))",
            ),
            "jdbc:oracle:thin:@//db:1521/ORCL",
        ),
        (
            ("jdbc:oracle:thin:@db:1521:ORCL", "jdbc:oracle:thin:u@DB:1521:ORCL"),
            "jdbc:oracle:thin:@db:1521:ORCL",
        ),
        # DB2 properties after the database, H2 and Derby's after ';'
        (
            ("jdbc:db2://db:50000/SAMPLE:currentSchema=LAKE;user=u;", "jdbc:db2://DB:50000/SAMPLE?currentSchema=LAKE"),
            "jdbc:db2://db:50000/SAMPLE?currentSchema=LAKE",
        ),
        (("jdbc:derby:memory:cat;create=true", "jdbc:derby:memory:cat"), "jdbc:derby:memory:cat"),
    ],
)  # fmt: skip
def test_a_jdbc_url_is_named_by_driver_hosts_database_and_schema(spellings, canonical):
    assert {normalize_uri(spelling) for spelling in spellings} == {canonical}
    assert normalize_uri(canonical) == canonical


@pytest.mark.parametrize(
    ("one", "other"),
    [
        (
            "jdbc:postgresql://db/iceberg?currentSchema=team_a",
            "jdbc:postgresql://db/iceberg?currentSchema=team_b",
        ),
        ("jdbc:postgresql://db/iceberg?currentSchema=team_a", "jdbc:postgresql://db/iceberg"),
        ("jdbc:sqlserver://db;databaseName=a", "jdbc:sqlserver://db;databaseName=b"),
        ("jdbc:oracle:thin:@db:1521:ORCL", "jdbc:oracle:thin:@//db:1521/ORCL"),  # a SID is not a service
        ("jdbc:h2:mem:cat", "jdbc:h2:cat"),  # in memory, or the file
    ],
)
def test_two_databases_or_schemas_are_two_names(one, other):
    assert normalize_uri(one) != normalize_uri(other)


# --------------------------------------------------------------------------- hosts


@pytest.mark.parametrize(
    ("spellings", "canonical"),
    [
        (("thrift://[::1]", "thrift://[0:0:0:0:0:0:0:1]:9083", "thrift://[0::1]"), "thrift://[::1]:9083"),
        (("thrift://[2001:DB8::1]", "thrift://[2001:0db8:0:0::1]"), "thrift://[2001:db8::1]:9083"),
        (("thrift://metastore.example.com.", "thrift://Metastore.Example.Com"), "thrift://metastore.example.com:9083"),
        (
            ("thrift://métastore.example.com", "thrift://MÉTASTORE.example.com.", "thrift://xn--mtastore-b1a.example.com"),
            "thrift://xn--mtastore-b1a.example.com:9083",
        ),
        (("hdfs://NN./wh", "hdfs://nn:8020/wh/"), "hdfs://nn:8020/wh"),
    ],
)  # fmt: skip
def test_one_host_has_one_spelling(spellings, canonical):
    assert {normalize_uri(spelling) for spelling in spellings} == {canonical}


def test_oci_keeps_its_bucket_which_is_not_user_info():
    assert location_dataset("oci://Bucket@tenancy/wh/db/t") == ("oci://Bucket@tenancy", "/wh/db/t")
    assert normalize_location("oci://one@tenancy/wh") != normalize_location("oci://two@tenancy/wh")


# --------------------------------------------------------------------------- normalising is idempotent


def _written_examples() -> list[str]:
    """Every URI, location and asset URI written as a string literal in the naming and asset tests."""
    files = ("test_naming.py", "test_assets.py", "test_operator_lineage.py", "test_catalog_config.py")
    found: set[str] = set()
    for name in files:
        tree = ast.parse((Path(__file__).parent / name).read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            text = node.value if isinstance(node, ast.Constant) else None
            if isinstance(text, str) and re.match(r"^(jdbc:|[A-Za-z][A-Za-z0-9+.-]*:/|/[a-z])", text.strip()):
                found.add(text)
    return sorted(found)


WRITTEN_EXAMPLES = _written_examples()


def test_the_examples_are_found():
    assert len(WRITTEN_EXAMPLES) > 150
    assert "jdbc:mysql:loadbalance://db-a:3306,db-b:3306/iceberg" in WRITTEN_EXAMPLES


@pytest.mark.parametrize("written", WRITTEN_EXAMPLES)
def test_normalising_twice_is_normalising_once(written):
    """For every example of the test files: each normaliser's result is its own normal form, and an
    asset URI canonical once is left as it is by Airflow's normalisation and by ``iceberg_asset``."""
    from airflow.sdk import Asset

    from airflow_iceberg.assets import build_uri, canonical_uri

    for normalize in (normalize_uri, normalize_location):
        try:
            once = normalize(written)
        except ValueError:  # a port that is not a number: refused, nothing to normalise
            continue
        assert normalize(once) == once, (normalize.__name__, once)
    if written.lower().startswith("iceberg:"):
        try:
            canonical = canonical_uri(written)
        except ValueError:  # a malformed asset URI, refused
            return
        assert canonical_uri(canonical) == canonical
        assert Asset(canonical).uri == canonical
    elif re.match(r"^(jdbc:|thrift://|https?://)", written.strip(), re.IGNORECASE):
        try:
            uri = normalize_uri(written)
        except ValueError:
            return
        kind = {"jdbc": "jdbc", "thrift": "hive"}.get(uri.split(":")[0], "rest")
        identity = {"uri": uri, **({"catalog": "c"} if kind == "jdbc" else {})}
        asset = build_uri(kind, ["db", "t"], identity)  # what an operator emits for that catalog
        assert Asset(asset).uri == asset and canonical_uri(asset) == asset, asset
