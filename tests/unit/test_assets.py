"""The iceberg asset URI scheme: one URI per catalog table, never a secret, never the Spark alias."""

from __future__ import annotations

import urllib.parse

import pytest
from airflow.sdk import Asset

from airflow_iceberg.assets import (
    asset_dataset_name,
    catalog_symlink,
    convert_asset_to_openlineage,
    create_asset,
    iceberg_asset,
    parse_uri,
    sanitize_uri,
    table_asset_uri,
)
from airflow_iceberg.catalog.config import config_from_fields
from airflow_iceberg.exceptions import InvalidCatalogConfigError
from airflow_iceberg.naming import location_dataset, normalize_uri

SECRET = "SENTINEL-secret"


def _uri(extra, host=None, login=None, password=None, table="db.orders"):
    return table_asset_uri(config_from_fields(extra, host=host, login=login, password=password), table)


# One connection per catalog type, and the URI it names (what docs/assets-and-lineage.md shows).
EXAMPLES = [
    (
        {"catalog_type": "hadoop", "warehouse": "/data/wh/"},
        None,
        "iceberg://hadoop/db/orders?warehouse=file%3A%2F%2F%2Fdata%2Fwh",
    ),
    (
        {"catalog_type": "rest", "warehouse": "analytics"},
        "https://Catalog.example.com:8181/api/catalog/",
        "iceberg://rest/db/orders?uri=https%3A%2F%2Fcatalog.example.com%3A8181%2Fapi%2Fcatalog"
        "&warehouse=analytics",
    ),
    (
        {"catalog_type": "hive"},
        "thrift://metastore:9083",
        "iceberg://hive/db/orders?uri=thrift%3A%2F%2Fmetastore%3A9083",
    ),
    (
        {"catalog_type": "jdbc", "warehouse": "s3://b/wh", "catalog_name": "pg"},
        "jdbc:postgresql://db:5432/iceberg",
        "iceberg://jdbc/db/orders?catalog=pg&uri=jdbc%3Apostgresql%3A%2F%2Fdb%3A5432%2Ficeberg",
    ),
    (
        {
            "catalog_type": "glue",
            "warehouse": "s3://b/wh",
            "catalog_properties": {"glue.id": "123456789012", "client.region": "eu-west-1"},
        },
        None,
        "iceberg://glue/db/orders?id=123456789012&region=eu-west-1",
    ),
    (
        {"catalog_type": "nessie", "warehouse": "s3://b/wh", "catalog_properties": {"ref": "dev"}},
        "http://nessie:19120/api/v2",
        "iceberg://nessie/db/orders?ref=dev&uri=http%3A%2F%2Fnessie%3A19120%2Fapi%2Fv2",
    ),
    (
        {"catalog_impl": "com.example.Cat", "warehouse": "s3://b/wh"},
        None,
        "iceberg://custom/db/orders?impl=com.example.Cat&warehouse=s3%3A%2F%2Fb%2Fwh",
    ),
]


@pytest.mark.parametrize(("extra", "host", "expected"), EXAMPLES)
def test_each_catalog_type_has_a_uri_that_airflow_keeps_as_is(extra, host, expected):
    uri = _uri(extra, host)
    assert uri == expected
    # Airflow's own normalisation (through our registered sanitize handler) leaves it unchanged
    assert Asset(uri).uri == uri


def test_the_spark_catalog_alias_does_not_change_the_uri():
    extra = {"catalog_type": "rest", "warehouse": "wh"}
    one = _uri({**extra, "catalog_name": "prod"}, "http://rest:8181", table="prod.db.t")
    two = _uri({**extra, "catalog_name": "lake"}, "http://rest:8181/", table="db.t")
    assert one == two


@pytest.mark.parametrize(
    ("first", "second"),
    [
        (
            ({"catalog_type": "rest", "warehouse": "a"}, "http://rest:8181"),
            ({"catalog_type": "rest", "warehouse": "b"}, "http://rest:8181"),
        ),
        (({"catalog_type": "rest"}, "http://rest-a:8181"), ({"catalog_type": "rest"}, "http://rest-b:8181")),
        (
            ({"catalog_type": "hadoop", "warehouse": "/wh/a"}, None),
            ({"catalog_type": "hadoop", "warehouse": "/wh/b"}, None),
        ),
        (({"catalog_type": "hive"}, "thrift://ms-a:9083"), ({"catalog_type": "hive"}, "thrift://ms-b:9083")),
        (
            ({"catalog_type": "jdbc", "warehouse": "/w"}, "jdbc:postgresql://db:5432/a"),
            ({"catalog_type": "jdbc", "warehouse": "/w"}, "jdbc:postgresql://db:5432/b"),
        ),
        # JdbcCatalog keys its rows by catalog name: two names on one database are two catalogs
        (
            ({"catalog_type": "jdbc", "warehouse": "/w", "catalog_name": "a"}, "jdbc:postgresql://db/x"),
            ({"catalog_type": "jdbc", "warehouse": "/w", "catalog_name": "b"}, "jdbc:postgresql://db/x"),
        ),
    ],
)
def test_different_catalogs_have_different_uris(first, second):
    assert _uri(*first) != _uri(*second)


def test_hadoop_warehouse_spellings_of_one_directory_agree():
    uris = {
        _uri({"catalog_type": "hadoop", "warehouse": w}) for w in ("/wh", "/wh/", "file:/wh", "file:///wh")
    }
    assert len(uris) == 1


def test_secrets_never_reach_the_uri():
    uris = [
        _uri({"catalog_type": "rest"}, "http://user@rest:8181?scope=catalog", password=SECRET),
        _uri({"catalog_type": "jdbc", "warehouse": "/w"}, f"jdbc:postgresql://db/x?user=u&password={SECRET}"),
        _uri(
            {"catalog_type": "jdbc", "warehouse": "/w"},
            f"jdbc:sqlserver://db:1433;databaseName=x;password={SECRET}",
        ),
        _uri({"catalog_type": "hadoop", "warehouse": "s3a://bucket/wh"}, login="k", password=SECRET),
    ]
    for uri in uris:
        assert SECRET not in urllib.parse.unquote(uri), uri
    assert "databaseName%3Dx" in uris[2]  # a property that names the database is kept
    # A secret in user info or a token parameter is refused before any asset is named.
    for extra, host in (
        ({"catalog_type": "rest"}, f"http://user:{SECRET}@rest:8181?token={SECRET}"),
        ({"catalog_type": "hadoop", "warehouse": f"s3a://key:{SECRET}@bucket/wh"}, None),
    ):
        with pytest.raises(InvalidCatalogConfigError) as refused:
            _uri(extra, host)
        assert SECRET not in str(refused.value)


def test_sanitize_canonicalises_a_hand_written_uri():
    written = Asset("iceberg://REST/db/orders?warehouse=wh&uri=HTTP://user@Rest:8181/api/").uri
    assert written == "iceberg://rest/db/orders?uri=http%3A%2F%2Frest%3A8181%2Fapi&warehouse=wh"


@pytest.mark.parametrize(
    ("uri", "message"),
    [
        ("iceberg://mysql/db/t?uri=x", "not one of"),
        ("iceberg://hadoop/orders?warehouse=/wh", "namespace"),
        ("iceberg://hadoop/db/t", "needs warehouse"),
        ("iceberg://jdbc/db/t?uri=jdbc:sqlite:/x", "needs catalog"),
        ("iceberg://rest/db/t?uri=http://r&token=abc", "unknown parameter"),
    ],
)
def test_sanitize_rejects_malformed_uris(uri, message):
    with pytest.raises(ValueError, match=message):
        sanitize_uri(urllib.parse.urlsplit(uri))


def test_multi_level_namespaces_and_hive_case():
    uri = _uri({"catalog_type": "hadoop", "warehouse": "/wh"}, table="a.b.T")
    assert parse_uri(uri)[1] == ["a", "b", "T"]
    assert "/db/orders?" in _uri({"catalog_type": "hive"}, "thrift://ms:9083", table="DB.Orders")


@pytest.mark.parametrize(
    ("table", "path", "parts"),
    [
        ("lake.`sales-eu`.Orders", "/sales-eu/Orders", ["sales-eu", "Orders"]),
        ("ventes.commandes_été", "/ventes/commandes_%C3%A9t%C3%A9", ["ventes", "commandes_été"]),
        ("lake.raw.events.v2_2024", "/raw/events/v2_2024", ["raw", "events", "v2_2024"]),
        ("lake.`my.ns`.`a/b c?`", "/my.ns/a%2Fb%20c%3F", ["my.ns", "a/b c?"]),
    ],
)
def test_real_world_names_are_one_percent_encoded_path_segment_per_part(table, path, parts):
    config = config_from_fields({"catalog_type": "hadoop", "warehouse": "/wh", "catalog_name": "lake"})
    uri = table_asset_uri(config, table)
    assert uri == f"iceberg://hadoop{path}?warehouse=file%3A%2F%2F%2Fwh"
    assert parse_uri(uri)[1] == parts
    assert urllib.parse.urlunsplit(sanitize_uri(urllib.parse.urlsplit(uri))) == uri  # Airflow keeps it
    assert create_asset(table=table, catalog_config=config).uri == uri
    assert asset_dataset_name(uri) == ("file", "/wh/" + "/".join(parts))


def test_openlineage_names_follow_openlineage_spark():
    assert location_dataset("file:/wh/db/t") == ("file", "/wh/db/t")
    assert location_dataset("/wh/db/t") == ("file", "/wh/db/t")
    assert location_dataset("s3a://bucket/wh/db/t") == ("s3://bucket", "wh/db/t")
    assert location_dataset("hdfs://nn:8020/wh/t") == ("hdfs://nn:8020", "/wh/t")  # HDFS keeps the slash
    assert asset_dataset_name(_uri({"catalog_type": "hadoop", "warehouse": "/wh"})) == (
        "file",
        "/wh/db/orders",
    )
    assert asset_dataset_name(_uri({"catalog_type": "hadoop", "warehouse": "hdfs://NN/wh/"})) == (
        "hdfs://nn:8020",
        "/wh/db/orders",
    )
    assert catalog_symlink("hive", ["db", "t"], {"uri": "thrift://ms:9083"}) == ("hive://ms:9083", "db.t")
    assert catalog_symlink("hive", ["DB", "T"], {"uri": "thrift://MS"}) == ("hive://ms:9083", "db.t")
    assert catalog_symlink("glue", ["db", "t"], {"id": "1", "region": "r"}) == (
        "arn:aws:glue:r:1",
        "table/db/t",
    )
    assert catalog_symlink("hadoop", ["db", "t"], {"warehouse": "file:///wh"}) == ("file:/wh", "db.t")
    assert catalog_symlink("rest", ["db", "t"], {"uri": "http://r:8181", "warehouse": "wh"}) == (
        "http://r:8181",
        "db.t",
    )


@pytest.mark.parametrize(
    ("kind", "identity", "symlink"),
    [
        # as openlineage-spark 1.53's IcebergHandler names them (Hadoop checked side by side in
        # tests/jobs/test_openlineage_spark.py)
        ("hadoop", {"warehouse": "file:///wh"}, ("file:/wh", "db.t")),
        ("hadoop", {"warehouse": "s3a://bucket/wh/"}, ("s3://bucket/wh", "db.t")),
        (
            "hadoop",
            {"warehouse": "abfs://cont@acct.dfs.core.windows.net/wh"},
            ("abfss://cont@acct.dfs.core.windows.net/wh", "db.t"),
        ),
        ("hadoop", {"warehouse": "hdfs://nn/wh"}, ("hdfs://nn:8020/wh", "db.t")),
        ("hive", {"uri": "thrift://ms"}, ("hive://ms:9083", "db.t")),
        ("glue", {"id": "1", "region": "eu-west-1"}, ("arn:aws:glue:eu-west-1:1", "table/db/t")),
        # REST and Nessie: the catalog URI alone, as openlineage-spark (no ?warehouse=, no ?ref=)
        (
            "rest",
            {"uri": "https://cat.example.com:443/api/catalog", "warehouse": "analytics"},
            ("https://cat.example.com:443/api/catalog", "db.t"),
        ),
        (
            "nessie",
            {"uri": "http://nessie:19120/api/v2", "ref": "dev"},
            ("http://nessie:19120/api/v2", "db.t"),
        ),
        # JDBC: openlineage-spark names nothing; the naming spec's name of the database, then the
        # catalog name (JdbcCatalog keys its rows by it), namespace and table
        (
            "jdbc",
            {"uri": "jdbc:postgresql://db:5432/iceberg", "catalog": "pg"},
            ("postgres://db:5432", "iceberg.pg.db.t"),
        ),
        (
            "jdbc",
            {"uri": "jdbc:postgresql://db:5432/iceberg?currentSchema=team_a", "catalog": "pg"},
            ("postgres://db:5432", "iceberg.team_a.pg.db.t"),
        ),
        (
            "jdbc",
            {"uri": "jdbc:mysql://db-a:3306,db-b:3306/iceberg", "catalog": "my"},
            ("mysql://db-a:3306", "iceberg.my.db.t"),
        ),
        (
            "jdbc",
            {"uri": "jdbc:sqlserver://db:1433;databaseName=ice", "catalog": "ms"},
            ("mssql://db:1433", "ice.ms.db.t"),
        ),
        (
            "jdbc",
            {"uri": "jdbc:oracle:thin:@//db:1521/svc", "catalog": "ora"},
            ("oracle://db:1521", "svc.ora.db.t"),
        ),
        # a database the spec does not name: by its URL and catalog name, as before
        (
            "jdbc",
            {"uri": "jdbc:sqlite:/data/cat.db", "catalog": "lite"},
            ("jdbc:sqlite:/data/cat.db?catalog=lite", "db.t"),
        ),
        (
            "custom",
            {"impl": "com.example.Cat", "warehouse": "s3://b/wh"},
            ("s3://b/wh", "db.t"),
        ),
    ],
)
def test_every_catalog_types_symlink_is_openlineage_sparks_or_the_specs(kind, identity, symlink):
    assert catalog_symlink(kind, ["db", "t"], identity) == symlink


HIVE_LIST = "iceberg://hive/db/orders?uri=thrift%3A%2F%2Fa%3A9083%2Cthrift%3A%2F%2Fb%3A9083"


@pytest.mark.parametrize(
    "host",
    [
        "thrift://a:9083,thrift://b:9083",
        "thrift://b:9083,thrift://a:9083",
        "thrift://B:9083 , thrift://a",
        "thrift://a:9083/,thrift://b,thrift://a",
    ],
)
def test_a_hive_metastore_list_is_one_catalog_whatever_its_order(host):
    assert _uri({"catalog_type": "hive"}, host) == HIVE_LIST
    assert Asset(HIVE_LIST).uri == HIVE_LIST
    hand_written = f"iceberg://hive/DB/Orders?uri={urllib.parse.quote(host, safe='')}"
    assert iceberg_asset(hand_written).uri == HIVE_LIST


@pytest.mark.parametrize(
    ("table", "hand_written"),
    [
        ("db.Orders", "iceberg://hive/DB/ORDERS?uri=thrift://Metastore"),
        ("`DB`.`orders`", "iceberg://hive/db/orders?uri=thrift://metastore:9083/"),
    ],
)
def test_hive_names_are_lower_cased_in_operator_and_hand_written_uris(table, hand_written):
    canonical = "iceberg://hive/db/orders?uri=thrift%3A%2F%2Fmetastore%3A9083"
    assert _uri({"catalog_type": "hive"}, "thrift://metastore", table=table) == canonical
    assert Asset(hand_written).uri == iceberg_asset(hand_written).uri == canonical


def test_glue_names_are_lower_cased_too_but_hadoop_names_keep_their_case():
    glue = {"catalog_type": "glue", "warehouse": "s3://b/wh", "catalog_properties": {"glue.id": "1"}}
    canonical = "iceberg://glue/sales/orders?id=1&warehouse=s3%3A%2F%2Fb%2Fwh"
    assert _uri(glue, table="Sales.Orders") == canonical
    assert Asset("iceberg://glue/Sales/Orders?id=1&warehouse=s3://b/wh/").uri == canonical
    assert "/Sales/Orders?" in _uri({"catalog_type": "hadoop", "warehouse": "/wh"}, table="Sales.Orders")


@pytest.mark.parametrize(
    ("spellings", "canonical"),
    [
        (("hdfs://nn/wh", "hdfs://NN:8020/wh/", "hdfs://nn:8020//wh"), "hdfs%3A%2F%2Fnn%3A8020%2Fwh"),
        (("s3a://bucket/wh", "s3://bucket/wh/", "s3n://bucket/wh"), "s3%3A%2F%2Fbucket%2Fwh"),
        (
            ("abfss://c@acct.dfs.core.windows.net/wh", "abfs://c@ACCT.dfs.core.windows.net/wh/"),
            "abfss%3A%2F%2Fc%40acct.dfs.core.windows.net%2Fwh",
        ),
    ],
)
def test_every_spelling_of_a_warehouse_is_one_asset(spellings, canonical):
    for warehouse in spellings:
        uri = _uri({"catalog_type": "hadoop", "warehouse": warehouse})
        assert uri == f"iceberg://hadoop/db/orders?warehouse={canonical}", warehouse
        assert iceberg_asset(f"iceberg://hadoop/db/orders?warehouse={warehouse}").uri == uri


def test_two_containers_of_one_storage_account_are_two_catalogs():
    one = _uri({"catalog_type": "hadoop", "warehouse": "abfss://one@acct.dfs.core.windows.net/wh"})
    two = _uri({"catalog_type": "hadoop", "warehouse": "abfss://two@acct.dfs.core.windows.net/wh"})
    assert one != two


def test_a_connection_whose_catalog_cannot_be_named_is_refused_naming_the_field():
    config = config_from_fields({"catalog_type": "hive"}, host="thrift://ms:90a83")
    with pytest.raises(InvalidCatalogConfigError, match=r"field 'URI' \(host\): .*'90a83'.* is not a number"):
        table_asset_uri(config, "db.t")


def test_iceberg_asset_names_any_spelling_like_the_operators_do():
    canonical = "iceberg://hadoop/db/events?warehouse=file%3A%2F%2F%2Fwh"
    for written in (
        "iceberg://hadoop/db/events?warehouse=file:///wh/",
        "ICEBERG://Hadoop/db/events/?warehouse=/wh",
    ):
        asset = iceberg_asset(written)
        assert (asset.name, asset.uri) == (canonical, canonical)
    with pytest.raises(ValueError, match="not an iceberg asset URI"):
        iceberg_asset("s3://bucket/key")


def test_the_scheme_is_registered_with_airflow():
    from airflow.sdk.providers_manager_runtime import ProvidersManagerTaskRuntime

    from airflow_iceberg import assets

    manager = ProvidersManagerTaskRuntime()
    assert manager.asset_uri_handlers["iceberg"] is assets.sanitize_uri
    assert manager.asset_factories["iceberg"] is assets.create_asset
    assert manager.asset_to_openlineage_converters["iceberg"] is assets.convert_asset_to_openlineage


def test_factory_and_openlineage_converter():
    config = config_from_fields({"catalog_type": "hadoop", "warehouse": "/wh", "catalog_name": "lake"})
    asset = create_asset(table="lake.db.orders", catalog_config=config)
    assert asset.name == asset.uri == "iceberg://hadoop/db/orders?warehouse=file%3A%2F%2F%2Fwh"
    dataset = convert_asset_to_openlineage(asset, None)
    assert (dataset.namespace, dataset.name) == ("file", "/wh/db/orders")
    hive = iceberg_asset("iceberg://hive/db/orders?uri=thrift://ms:9083")
    dataset = convert_asset_to_openlineage(hive, None)
    assert (dataset.namespace, dataset.name) == ("hive://ms:9083", "db.orders")


# --------------------------------------------------------------------------- two catalogs, two assets


def test_two_jdbc_catalogs_in_two_postgresql_schemas_are_two_assets():
    """pgjdbc's ``currentSchema`` picks the schema JdbcCatalog keeps ``iceberg_tables`` in, so the
    same catalog name on one database, in two schemas, is two catalogs with two ``db.orders``."""
    extra = {"catalog_type": "jdbc", "warehouse": "s3://lake/wh", "catalog_name": "lake"}
    team_a = _uri(extra, "jdbc:postgresql://db:5432/iceberg?currentSchema=team_a")
    team_b = _uri(extra, "jdbc:postgresql://db:5432/iceberg?currentSchema=team_b")
    assert team_a != team_b
    schema = urllib.parse.quote("jdbc:postgresql://db:5432/iceberg?currentSchema=team_a", safe="")
    assert team_a == f"iceberg://jdbc/db/orders?catalog=lake&uri={schema}"
    # the same schema spelled through libpq's options, with client options around it, is the same catalog
    same = _uri(extra, "jdbc:postgresql://DB/iceberg?sslmode=require&options=-c%20search_path%3Dteam_a")
    assert same == team_a
    assert iceberg_asset(f"iceberg://jdbc/db/orders?catalog=lake&uri={schema}").uri == team_a


def test_glue_catalogs_of_two_accounts_or_two_regions_are_two_assets():
    """Without ``glue.id`` the Glue catalog is the account's the credentials belong to, without a
    region the environment's: the warehouse is then part of the identity too."""

    def glue(warehouse, login=None, **props):
        extra = {"catalog_type": "glue", "warehouse": warehouse, "catalog_properties": props}
        return _uri(extra, login=login, password="secret" if login else None)

    account_a = glue("s3://a-lake/wh", "AKIA-ACCOUNT-A", **{"client.region": "eu-west-1"})
    account_b = glue("s3://b-lake/wh", "AKIA-ACCOUNT-B", **{"client.region": "eu-west-1"})
    assert account_a != account_b
    assert account_a == "iceberg://glue/db/orders?region=eu-west-1&warehouse=s3%3A%2F%2Fa-lake%2Fwh"
    region_1 = glue("s3://us/wh", **{"glue.id": "1"})
    region_2 = glue("s3://eu/wh", **{"glue.id": "1"})
    assert region_1 != region_2
    # with both, the catalog is known: its warehouse may change without changing its assets
    both = {"glue.id": "1", "glue.region": "eu-west-1"}
    assert (
        glue("s3://one/wh", **both)
        == glue("s3://two/wh", **both)
        == "iceberg://glue/db/orders?id=1&region=eu-west-1"
    )
    # a hand-written URI is named the same way, and one that cannot tell the catalog is refused
    assert (
        iceberg_asset("iceberg://glue/db/orders?region=eu-west-1&warehouse=s3://a-lake/wh/").uri == account_a
    )
    assert iceberg_asset("iceberg://glue/db/orders?id=1&region=eu-west-1&warehouse=s3://x").uri == (
        "iceberg://glue/db/orders?id=1&region=eu-west-1"
    )
    with pytest.raises(ValueError, match="needs id and region, or warehouse"):
        Asset("iceberg://glue/db/orders?region=eu-west-1")


def test_two_oci_buckets_of_one_namespace_are_two_assets():
    """OCI's HDFS connector addresses ``oci://<bucket>@<namespace>/path``: the part before ``@``
    is the bucket (as ``abfss://container@account`` is the container), not user info."""
    one = _uri({"catalog_type": "hadoop", "warehouse": "oci://bucket-one@tenancy/wh"})
    two = _uri({"catalog_type": "hadoop", "warehouse": "oci://bucket-two@tenancy/wh"})
    assert one != two
    assert one == "iceberg://hadoop/db/orders?warehouse=oci%3A%2F%2Fbucket-one%40tenancy%2Fwh"
    assert asset_dataset_name(one) == ("oci://bucket-one@tenancy", "/wh/db/orders")


# --------------------------------------------------------------------------- never a credential


#: A JDBC URL in every form the drivers document, each carrying the sentinel as a credential
#: (Oracle's ``user/password@``, user info, ``password=`` as a query, ``;`` or DB2 ``:`` property,
#: inside MySQL's ``address=(...)``), or in a property that chooses nothing (``ApplicationName``).
JDBC_URLS_WITH_A_SECRET = [
    f"jdbc:oracle:thin:scott/{SECRET}@//db:1521/ORCL",
    f"jdbc:oracle:thin:scott/{SECRET}@db:1521:ORCL",
    f"jdbc:oracle:oci:scott/{SECRET}@tnsalias",
    f"jdbc:oracle:thin:scott/{SECRET}@(DESCRIPTION=(ADDRESS=(HOST=db)(PORT=1521))(CONNECT_DATA=(SID=X)))",
    f"jdbc:oracle:thin:scott/{SECRET}@tcps://db:2484/svc?wallet_location=/w",
    f"jdbc:postgresql://db/iceberg?user=u&password={SECRET}",
    f"jdbc:postgresql://u:{SECRET}@db/iceberg",
    f"jdbc:postgresql:iceberg?password={SECRET}",
    f"jdbc:postgresql://a,b/iceberg?currentSchema=s&ApplicationName={SECRET}",
    f"jdbc:mysql:replication://address=(host=a)(port=3306)(password={SECRET}),b/iceberg",
    f"jdbc:mariadb:sequential://a,b/iceberg?user=u&password={SECRET}",
    f"jdbc:sqlserver://db;databaseName=x;password={{{SECRET};x}}",
    f"jdbc:sqlserver://;serverName=db;databaseName=x;accessToken={SECRET}",
    f"jdbc:db2://db:50000/SAMPLE:user=u;password={SECRET};currentSchema=LAKE;",
    f"jdbc:h2:tcp://db/~/cat;USER=u;PASSWORD={SECRET}",
    f"jdbc:derby://db:1527/cat;user=u;password={SECRET}",
    f"jdbc:redshift://u:{SECRET}@cluster.example.com:5439/dev",
    f"jdbc:foo:u/{SECRET}@db/cat",
    f"jdbc:foo:cat:user=u;password={SECRET};",
    f"jdbc:sqlite:/data/cat.db?password={SECRET}",
]


@pytest.mark.parametrize("jdbc_url", JDBC_URLS_WITH_A_SECRET)
def test_no_jdbc_url_puts_a_credential_in_an_asset_uri_or_an_openlineage_name(jdbc_url):
    """The identity keeps driver, hosts, ports, database and schema-choosing keys, nothing else:
    through a connection (which refuses a credential in the URI, or takes ``password=`` out of it),
    in a hand-written asset, in Airflow's own normalisation and in the OpenLineage symlink."""
    name = normalize_uri(jdbc_url)
    assert SECRET not in urllib.parse.unquote(name), name
    for uri in (
        iceberg_asset(f"iceberg://jdbc/db/t?catalog=c&uri={urllib.parse.quote(jdbc_url, safe='')}").uri,
        Asset(f"iceberg://jdbc/db/t?catalog=c&uri={urllib.parse.quote(jdbc_url, safe='')}").uri,
    ):
        assert SECRET not in urllib.parse.unquote(uri), uri
        assert SECRET not in "".join(catalog_symlink(*parse_uri(uri))), uri
    try:
        uri = _uri({"catalog_type": "jdbc", "warehouse": "/w", "catalog_name": "c"}, jdbc_url)
    except InvalidCatalogConfigError as refused:  # a credential left in the URI, refused by name
        assert SECRET not in str(refused)
    else:
        assert SECRET not in urllib.parse.unquote(uri) and SECRET not in "".join(
            catalog_symlink(*parse_uri(uri))
        )


def test_a_port_that_is_not_a_number_is_refused_without_the_credentials_around_it():
    for jdbc_url in (
        f"jdbc:oracle:thin:scott/{SECRET}@//db:x/ORCL",
        f"jdbc:mysql://address=(host=a)(port=x)(password={SECRET})/db",
    ):
        with pytest.raises(ValueError, match="is not a number") as refused:
            normalize_uri(jdbc_url)
        assert SECRET not in str(refused.value)


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
    assert iceberg_asset(f"iceberg://hive/db/orders?uri={urllib.parse.quote(one, safe='')}").uri == _uri(
        {"catalog_type": "hive"}, other
    )


def test_a_hand_written_warehouse_with_a_plus_is_the_operators_warehouse():
    """A REST warehouse named ``team+prod``: ``iceberg_asset`` reads a hand-written ``+`` as written
    (Airflow's ``Asset`` reads the query as a form, a ``+`` being a space there: the docs say to
    percent-encode); a space is ``%20`` in the canonical form, so no canonical URI holds a ``+``."""
    operator = _uri({"catalog_type": "rest", "warehouse": "team+prod"}, "http://rest:8181")
    assert operator == "iceberg://rest/db/orders?uri=http%3A%2F%2Frest%3A8181&warehouse=team%2Bprod"
    assert Asset(operator).uri == operator  # the operator's own URI is stable
    assert iceberg_asset("iceberg://rest/db/orders?uri=http://rest:8181&warehouse=team+prod").uri == operator
    assert (
        iceberg_asset("iceberg://rest/db/orders?uri=http://rest:8181&warehouse=team%2Bprod").uri == operator
    )
    spaced = _uri({"catalog_type": "rest", "warehouse": "team prod"}, "http://rest:8181")
    assert spaced.endswith("&warehouse=team%20prod") and "+" not in spaced
    assert Asset(spaced).uri == iceberg_asset(spaced).uri == spaced
    assert iceberg_asset("iceberg://rest/db/orders?uri=http://rest:8181&warehouse=team%20prod").uri == spaced
