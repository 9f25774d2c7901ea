"""Hostile review of "One table, one asset URI" (docs/guarantees.md): spellings and catalogs that break it.

Every test here fails on the code as reviewed: each shows two spellings of one catalog that get
two assets, two catalogs that get one asset, or a secret that reaches an asset URI. The
operator's asset is taken from a real ``execute()`` (only the spark-submit process is replaced,
as in ``test_operator_lineage``), and the hand-written one through Airflow's own ``Asset``
normalisation and ``iceberg_asset``, as a consumer DAG would write it.
"""

from __future__ import annotations

import json
import urllib.parse
from pathlib import Path
from unittest import mock

import pytest
from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator
from airflow.sdk import Asset, AssetAlias
from airflow.sdk.execution_time.context import OutletEventAccessors

from airflow_iceberg.assets import catalog_symlink, iceberg_asset, parse_uri, table_asset_uri
from airflow_iceberg.catalog.config import config_from_fields
from airflow_iceberg.operators import IcebergAppendOperator


def _uri(extra, host=None, login=None, password=None, table="db.orders"):
    return table_asset_uri(config_from_fields(extra, host=host, login=login, password=password), table)


def _emitted_asset_key(conn_id: str, table: str = "db.orders") -> tuple[str, str]:
    """(name, uri) of the asset a real ``execute()`` attaches to its alias after a commit."""
    result = {"status": "success", "table": f"lake.{table}", "snapshot_id": 42, "operation": "append"}

    def submit(self, context):
        args = self.application_args
        Path(args[args.index("--result-file") + 1]).write_text(json.dumps(result))

    op = IcebergAppendOperator(
        task_id="append", table=table, iceberg_conn_id=conn_id, source_query="SELECT 1"
    )
    events = OutletEventAccessors()
    with mock.patch.object(SparkSubmitOperator, "execute", submit):
        op.execute({"outlet_events": events})
    (event,) = events[AssetAlias(f"iceberg-table:{conn_id}:{table}")].asset_alias_events
    return event.dest_asset_key.name, event.dest_asset_key.uri


# --------------------------------------------------------------------------- one catalog, two assets


@pytest.mark.parametrize(
    "jdbc_url",
    [
        "jdbc:postgresql:iceberg",  # pgjdbc's documented form: database 'iceberg' on localhost:5432
        "jdbc:mysql:loadbalance://db-a:3306,db-b:3306/iceberg",  # Connector/J's documented failover forms
        "jdbc:mariadb:sequential://db-a,db-b/iceberg",
    ],
)
def test_the_canonical_uri_of_a_valid_jdbc_url_is_canonical(iceberg_connection, spark_connection, jdbc_url):
    """The operator names the asset by the normaliser's first pass; Airflow's ``Asset`` runs the
    registered handler again, and the second pass differs. The emitted asset's name is then not
    its URI, and ``iceberg_asset()`` of any spelling (even the operator's own URI) is another
    asset: Airflow keys assets by (name, uri), so the consumer the docs recommend never runs."""
    conn_id = iceberg_connection(
        "pg_local",
        host=jdbc_url,
        extra={"catalog_name": "lake", "catalog_type": "jdbc", "warehouse": "/wh", "runtime_jar": "/j.jar"},
    )
    name, uri = _emitted_asset_key(conn_id)
    consumer = iceberg_asset(name)  # the operator's own URI, as logged, copied into a consumer DAG
    assert (consumer.name, consumer.uri) == (name, uri)


# --------------------------------------------------------------------------- two catalogs, one asset


def test_two_jdbc_catalogs_in_two_postgresql_schemas_are_two_assets():
    """pgjdbc's ``currentSchema`` picks the schema JdbcCatalog keeps ``iceberg_tables`` in, so the
    same catalog name on one database, in two schemas, is two catalogs with two different
    ``db.orders`` tables. The query string is dropped as "client options", and they collide: a
    commit to team_a's table triggers the DAGs scheduled on team_b's."""
    extra = {"catalog_type": "jdbc", "warehouse": "s3://lake/wh", "catalog_name": "lake"}
    team_a = _uri(extra, "jdbc:postgresql://db:5432/iceberg?currentSchema=team_a")
    team_b = _uri(extra, "jdbc:postgresql://db:5432/iceberg?currentSchema=team_b")
    assert team_a != team_b


def test_two_glue_catalogs_of_two_accounts_in_one_region_are_two_assets():
    """Without ``glue.id`` the Glue catalog is the one of the account the credentials belong to.
    The identity keeps only what is set (the region), so two accounts' catalogs get one URI."""
    account_a = _uri(
        {
            "catalog_type": "glue",
            "warehouse": "s3://a-lake/wh",
            "catalog_properties": {"client.region": "eu-west-1"},
        },
        login="AKIA-ACCOUNT-A",
        password="secret-a",
    )
    account_b = _uri(
        {
            "catalog_type": "glue",
            "warehouse": "s3://b-lake/wh",
            "catalog_properties": {"client.region": "eu-west-1"},
        },
        login="AKIA-ACCOUNT-B",
        password="secret-b",
    )
    assert account_a != account_b


def test_one_accounts_glue_catalogs_in_two_regions_are_two_assets():
    """Without a region the Glue catalog is the one of the region the environment names (Glue
    catalogs are regional); the identity keeps only ``glue.id``, so both regions get one URI."""
    region_1 = _uri(
        {"catalog_type": "glue", "warehouse": "s3://us/wh", "catalog_properties": {"glue.id": "1"}}
    )
    region_2 = _uri(
        {"catalog_type": "glue", "warehouse": "s3://eu/wh", "catalog_properties": {"glue.id": "1"}}
    )
    assert region_1 != region_2


def test_two_oci_buckets_of_one_namespace_are_two_assets():
    """OCI's HDFS connector addresses ``oci://<bucket>@<namespace>/path``: the part before ``@``
    is the bucket (as ``abfss://container@account`` is the container), not user info."""
    one = _uri({"catalog_type": "hadoop", "warehouse": "oci://bucket-one@tenancy/wh"})
    two = _uri({"catalog_type": "hadoop", "warehouse": "oci://bucket-two@tenancy/wh"})
    assert one != two


# --------------------------------------------------------------------------- never a secret


def test_an_oracle_jdbc_url_with_credentials_does_not_put_the_password_in_the_asset_uri():
    """``jdbc:oracle:thin:user/password@host:port/service`` is Oracle's documented form with
    credentials. The docs promise the URI "never contains a login, a password"; here both go
    into the asset URI (the Assets page, the metadata DB) and into the OpenLineage symlink."""
    uri = _uri(
        {"catalog_type": "jdbc", "warehouse": "/w", "catalog_name": "lake"},
        "jdbc:oracle:thin:scott/SENTINEL-secret@//db:1521/ORCL",
    )
    assert "SENTINEL-secret" not in urllib.parse.unquote(uri)
    assert "SENTINEL-secret" not in catalog_symlink(*parse_uri(uri))[0]


# --------------------------------------------------------------------------- one host, two spellings


@pytest.mark.parametrize(
    ("one", "other"),
    [
        ("thrift://[::1]:9083", "thrift://[0:0:0:0:0:0:0:1]:9083"),  # one IPv6 address, two spellings
        ("thrift://metastore.example.com.:9083", "thrift://metastore.example.com:9083"),  # absolute FQDN
        ("thrift://métastore.example.com:9083", "thrift://xn--mtastore-b1a.example.com:9083"),  # IDNA
    ],
)
def test_one_metastore_host_spelled_two_ways_is_one_asset(one, other):
    assert _uri({"catalog_type": "hive"}, one) == _uri({"catalog_type": "hive"}, other)


def test_a_hand_written_warehouse_with_a_plus_is_the_operators_warehouse():
    """The docs write hand-made URIs unencoded (``?uri=http://rest:8181&warehouse=wh``); a REST
    warehouse named ``team+prod`` then reads back as ``team prod`` (form decoding), another asset."""
    operator = _uri({"catalog_type": "rest", "warehouse": "team+prod"}, "http://rest:8181")
    assert Asset(operator).uri == operator  # the operator's own URI is stable
    assert iceberg_asset("iceberg://rest/db/orders?uri=http://rest:8181&warehouse=team+prod").uri == operator


# --------------------------------------------------------------------------- aliases of templated tables


def test_the_alias_of_a_templated_table_is_not_shared_by_unrelated_producers():
    """The docs: to schedule on "whatever this task writes", use ``AssetAlias("iceberg-table:
    my_conn:db.{{ params.table }}")``. An alias is global by name in Airflow, and the name is the
    connection and the template *text*: every task of every DAG built from the same template (a
    DAG factory, a shared default) declares the same alias. A commit of ``db.refunds`` by one DAG
    then triggers the consumer of another DAG's ``db.orders``."""
    from airflow.sdk import DAG

    aliases = []
    for dag_id, table in (("load_orders", "orders"), ("load_refunds", "refunds")):
        with DAG(dag_id, schedule=None, params={"table": table}):
            task = IcebergAppendOperator(
                task_id="load", table="db.{{ params.table }}", iceberg_conn_id="lake", source_query="SELECT 1"
            )
        aliases.append(task.outlets[0])
    assert aliases[0] != aliases[1]
