"""The mapping from a connection to Spark settings, for every catalog type, asserted exactly."""

from __future__ import annotations

import re

import pytest

from airflow_iceberg.catalog.config import config_from_fields
from airflow_iceberg.catalog.spark_settings import (
    ICEBERG_EXTENSIONS,
    REDACTION_REGEX,
    combined_settings,
    redaction_regex,
    runtime_conflict,
    runtime_coordinate,
    spark_settings,
)
from airflow_iceberg.exceptions import CatalogSettingsConflictError, InvalidCatalogConfigError

BASE = {"spark.sql.extensions": ICEBERG_EXTENSIONS, "spark.redaction.regex": REDACTION_REGEX}


def settings_for(extra, **fields):
    return spark_settings(config_from_fields(extra, **fields))


def test_hadoop_catalog_with_local_runtime_jar():
    settings = settings_for(
        {
            "catalog_name": "hadoop_prod",
            "catalog_type": "hadoop",
            "warehouse": "hdfs://nn:8020/warehouse/path",
            "runtime_jar": "/opt/iceberg.jar",
        }
    )
    assert settings.conf == {
        **BASE,
        "spark.sql.catalog.hadoop_prod": "org.apache.iceberg.spark.SparkCatalog",
        "spark.sql.catalog.hadoop_prod.type": "hadoop",
        "spark.sql.catalog.hadoop_prod.warehouse": "hdfs://nn:8020/warehouse/path",
    }
    assert settings.secret_conf == {}
    assert settings.jars == ("/opt/iceberg.jar",)
    assert settings.packages == ()


def test_default_runtime_is_the_maven_coordinate_for_spark_and_scala():
    settings = settings_for({"catalog_type": "hadoop", "warehouse": "/wh"})
    assert settings.packages == ("org.apache.iceberg:iceberg-spark-runtime-3.5_2.12:1.12.0",)
    config = config_from_fields(
        {
            "catalog_type": "hadoop",
            "warehouse": "/wh",
            "spark_version": "3.4.1",
            "scala_version": "2.13",
            "iceberg_version": "1.6.0",
        }
    )
    assert runtime_coordinate(config) == "org.apache.iceberg:iceberg-spark-runtime-3.4_2.13:1.6.0"


@pytest.mark.parametrize(
    ("versions", "coordinate"),
    [
        ({"spark_version": "4.0"}, "iceberg-spark-runtime-4.0_2.13:1.11.0"),
        ({"spark_version": "4.0.1", "iceberg_version": "1.10.0"}, "iceberg-spark-runtime-4.0_2.13:1.10.0"),
        ({"spark_version": "4.1"}, "iceberg-spark-runtime-4.1_2.13:1.12.0"),
        ({"spark_version": "4.1", "iceberg_version": "1.11.0"}, "iceberg-spark-runtime-4.1_2.13:1.11.0"),
    ],
)
def test_spark4_runtime_coordinate_is_the_scala_2_13_build(versions, coordinate):
    settings = settings_for({"catalog_type": "hadoop", "warehouse": "/wh", **versions})
    assert settings.packages == (f"org.apache.iceberg:{coordinate}",)


def test_hive_catalog_from_host_and_port():
    settings = settings_for(
        {
            "catalog_name": "hive_prod",
            "catalog_type": "hive",
            "warehouse": "file:///wh",
            "cache_enabled": "false",
            "cache_expiration_interval_ms": "60000",
            "default_namespace": "sales",
        },
        host="thrift://metastore",
        port=9083,
    )
    assert settings.conf == {
        **BASE,
        "spark.sql.catalog.hive_prod": "org.apache.iceberg.spark.SparkCatalog",
        "spark.sql.catalog.hive_prod.type": "hive",
        "spark.sql.catalog.hive_prod.uri": "thrift://metastore:9083",
        "spark.sql.catalog.hive_prod.warehouse": "file:///wh",
        "spark.sql.catalog.hive_prod.default-namespace": "sales",
        "spark.sql.catalog.hive_prod.cache-enabled": "false",
        "spark.sql.catalog.hive_prod.cache.expiration-interval-ms": "60000",
    }


def test_jdbc_credentials_are_split_out_as_secrets():
    settings = settings_for(
        {
            "catalog_name": "pg",
            "catalog_type": "jdbc",
            "warehouse": "file:///wh",
            "extra_jars": "/usr/share/java/postgresql.jar",
        },
        host="jdbc:postgresql://127.0.0.1:5432/iceberg",
        login="etl",
        password="s3cret",
    )
    assert settings.conf["spark.sql.catalog.pg.jdbc.user"] == "etl"
    assert settings.conf["spark.sql.catalog.pg.jdbc.schema-version"] == "V1"
    assert settings.conf["spark.sql.catalog.pg.uri"] == "jdbc:postgresql://127.0.0.1:5432/iceberg"
    assert settings.secret_conf == {"spark.sql.catalog.pg.jdbc.password": "s3cret"}
    assert "s3cret" not in repr(settings)
    assert settings.jars == ("/usr/share/java/postgresql.jar",)


def test_rest_oauth2_client_credentials():
    settings = settings_for(
        {
            "catalog_name": "rest_prod",
            "catalog_type": "rest",
            "catalog_properties": {
                "oauth2-server-uri": "https://idp/v1/oauth/tokens",
                "scope": "PRINCIPAL_ROLE:ALL",
                "warehouse": "analytics",
            },
        },
        host="https://rest.example.com/api/catalog",
        login="client-id",
        password="client-secret",
    )
    assert settings.conf == {
        **BASE,
        "spark.sql.catalog.rest_prod": "org.apache.iceberg.spark.SparkCatalog",
        "spark.sql.catalog.rest_prod.type": "rest",
        "spark.sql.catalog.rest_prod.uri": "https://rest.example.com/api/catalog",
        "spark.sql.catalog.rest_prod.oauth2-server-uri": "https://idp/v1/oauth/tokens",
        "spark.sql.catalog.rest_prod.scope": "PRINCIPAL_ROLE:ALL",
        "spark.sql.catalog.rest_prod.warehouse": "analytics",
    }
    assert settings.secret_conf == {"spark.sql.catalog.rest_prod.credential": "client-id:client-secret"}


def test_rest_vended_credentials_header_reaches_spark_and_pyiceberg_unchanged():
    """Iceberg's REST client (and pyiceberg's) send each ``header.*`` catalog property as an HTTP header.

    Not run end to end here: SeaweedFS's REST catalog vends no credentials (see docs/catalogs.md).
    """
    from airflow_iceberg.catalog.pyiceberg_tables import pyiceberg_properties

    extra = {
        "catalog_name": "rest",
        "catalog_type": "rest",
        "io_impl": "org.apache.iceberg.aws.s3.S3FileIO",
        "catalog_properties": {"header.X-Iceberg-Access-Delegation": "vended-credentials"},
    }
    config = config_from_fields(extra, host="https://rest.example.com/api/catalog", login="id", password="pw")
    settings = spark_settings(config)
    assert settings.conf["spark.sql.catalog.rest.header.X-Iceberg-Access-Delegation"] == "vended-credentials"
    assert not any("s3." in key for key in {**settings.conf, **settings.secret_conf})
    assert settings.secret_conf == {"spark.sql.catalog.rest.credential": "id:pw"}
    assert pyiceberg_properties(config)["header.X-Iceberg-Access-Delegation"] == "vended-credentials"


def test_rest_bearer_token_from_password_alone():
    settings = settings_for({"catalog_type": "rest"}, host="http://127.0.0.1:8181", password="tok")
    assert settings.secret_conf == {"spark.sql.catalog.iceberg.token": "tok"}


def test_nessie_token_and_glue_keys():
    nessie = settings_for(
        {"catalog_type": "nessie", "catalog_properties": {"ref": "main"}},
        host="http://nessie:19120/api/v2",
        password="tok",
    )
    assert nessie.secret_conf == {"spark.sql.catalog.iceberg.authentication.token": "tok"}
    assert nessie.conf["spark.sql.catalog.iceberg.ref"] == "main"
    glue = settings_for(
        {
            "catalog_type": "glue",
            "warehouse": "s3://bucket/wh",
            "io_impl": "org.apache.iceberg.aws.s3.S3FileIO",
        },
        login="AKIA",
        password="secret",
    )
    assert glue.conf["spark.sql.catalog.iceberg.io-impl"] == "org.apache.iceberg.aws.s3.S3FileIO"
    assert glue.secret_conf == {
        "spark.sql.catalog.iceberg.s3.access-key-id": "AKIA",
        "spark.sql.catalog.iceberg.s3.secret-access-key": "secret",
    }


def test_custom_catalog_impl_in_the_emr_dlf_shape():
    settings = settings_for(
        {
            "catalog_name": "dlf_catalog",
            "catalog_impl": "org.apache.iceberg.aliyun.dlf.DlfCatalog",
            "io_impl": "org.apache.iceberg.hadoop.HadoopFileIO",
            "warehouse": "oss://bucket/wh",
            "login_property": "access.key.id",
            "password_property": "access.key.secret",
            "catalog_properties": {
                "oss.endpoint": "oss-cn-hangzhou.aliyuncs.com",
                "dlf.catalog-id": "123",
                "dlf.endpoint": "dlf.cn-hangzhou.aliyuncs.com",
                "dlf.region-id": "cn-hangzhou",
            },
        },
        login="LTAI-key-id",
        password="key-secret",
    )
    prefix = "spark.sql.catalog.dlf_catalog"
    assert settings.conf == {
        **BASE,
        prefix: "org.apache.iceberg.spark.SparkCatalog",
        f"{prefix}.catalog-impl": "org.apache.iceberg.aliyun.dlf.DlfCatalog",
        f"{prefix}.io-impl": "org.apache.iceberg.hadoop.HadoopFileIO",
        f"{prefix}.warehouse": "oss://bucket/wh",
        f"{prefix}.oss.endpoint": "oss-cn-hangzhou.aliyuncs.com",
        f"{prefix}.dlf.catalog-id": "123",
        f"{prefix}.dlf.endpoint": "dlf.cn-hangzhou.aliyuncs.com",
        f"{prefix}.dlf.region-id": "cn-hangzhou",
    }
    # The access key id is half of a credential: it stays off argv too.
    assert settings.secret_conf == {
        f"{prefix}.access.key.id": "LTAI-key-id",
        f"{prefix}.access.key.secret": "key-secret",
    }


def test_per_catalog_hadoop_properties_and_s3a_keys():
    settings = settings_for(
        {
            "catalog_name": "hadoop_prod",
            "catalog_type": "hadoop",
            "warehouse": "s3a://b/wh",
            "hadoop_properties": '{"fs.s3a.endpoint": "http://aws-local:9000", '
            '"fs.s3a.path.style.access": true, "hadoop.rpc.protection": "privacy"}',
        },
        login="minio",
        password="minio123",
    )
    assert settings.conf["spark.sql.catalog.hadoop_prod.hadoop.fs.s3a.endpoint"] == "http://aws-local:9000"
    assert settings.conf["spark.sql.catalog.hadoop_prod.hadoop.fs.s3a.path.style.access"] == "true"
    # Hadoop's own hadoop.* keys keep their name: Iceberg strips one hadoop., leaving hadoop.rpc.protection.
    assert settings.conf["spark.sql.catalog.hadoop_prod.hadoop.hadoop.rpc.protection"] == "privacy"
    assert settings.secret_conf == {
        "spark.sql.catalog.hadoop_prod.hadoop.fs.s3a.access.key": "minio",
        "spark.sql.catalog.hadoop_prod.hadoop.fs.s3a.secret.key": "minio123",
    }


def test_secret_properties_never_reach_argv_settings_and_settings_about_secrets_do():
    settings = settings_for(
        {
            "catalog_type": "rest",
            "secret_properties": {"s3.secret-access-key": "x", "s3.access-key-id": "y", "header.X-Api": "z"},
            "catalog_properties": {
                "s3.endpoint": "e",
                "token-refresh-enabled": "false",  # about a token, not one
                "client.credentials-provider": "com.example.Provider",
            },
            "hadoop_properties": {"fs.s3a.aws.credentials.provider": "com.example.Provider"},
        },
        host="http://rest:8181",
    )
    assert set(settings.secret_conf) == {
        "spark.sql.catalog.iceberg.s3.secret-access-key",
        "spark.sql.catalog.iceberg.s3.access-key-id",
        "spark.sql.catalog.iceberg.header.X-Api",
    }
    for key in (
        "s3.endpoint",
        "token-refresh-enabled",
        "client.credentials-provider",
        "hadoop.fs.s3a.aws.credentials.provider",
    ):
        assert f"spark.sql.catalog.iceberg.{key}" in settings.conf


def test_the_redaction_regex_covers_every_secret_key_however_harmless_its_name():
    """Spark redacts a setting only when ``spark.redaction.regex`` matches its key or value."""
    settings = settings_for(
        {"catalog_name": "demo", "catalog_type": "hive", "pass_property": "jdbc.pw"},
        password="p",
        host="thrift://m:9083",
    )
    regex = settings.conf["spark.redaction.regex"]
    assert regex == f"{REDACTION_REGEX}|spark[.]sql[.]catalog[.]demo[.]jdbc[.]pw"
    for key in settings.secret_conf:
        assert re.search(regex.removeprefix("(?i)"), key, re.IGNORECASE), key
    assert not re.search(r"(?i)secret|password", regex)  # SparkSubmitHook's log masking would garble argv


def test_the_redaction_regex_of_two_catalogs_covers_both_and_keeps_the_users():
    first = config_from_fields(
        {"catalog_name": "a", "catalog_type": "hive", "pass_property": "x.pw"}, password="p"
    )
    second = config_from_fields(
        {"catalog_name": "b", "catalog_type": "hive", "pass_property": "y.pw"}, password="q"
    )
    settings = combined_settings([first, second])
    assert settings.conf["spark.redaction.regex"] == (
        f"{REDACTION_REGEX}|spark[.]sql[.]catalog[.]a[.]x[.]pw|spark[.]sql[.]catalog[.]b[.]y[.]pw"
    )
    mine = redaction_regex(settings.secret_conf, "(?i)mycompany")
    assert mine == f"(?:(?i)mycompany)|(?:{settings.conf['spark.redaction.regex']})"
    assert redaction_regex({}, REDACTION_REGEX) == REDACTION_REGEX


def test_session_catalog_over_hive_shares_the_metastore_with_spark():
    settings = settings_for(
        {"catalog_type": "hive", "session_catalog": True, "warehouse": "file:///wh"},
        host="thrift://127.0.0.1:9083",
    )
    assert settings.catalog_names == ("spark_catalog",)
    assert settings.conf["spark.sql.catalog.spark_catalog"] == "org.apache.iceberg.spark.SparkSessionCatalog"
    assert settings.conf["spark.sql.catalog.spark_catalog.type"] == "hive"
    assert settings.conf["spark.sql.catalogImplementation"] == "hive"
    assert settings.conf["spark.hadoop.hive.metastore.uris"] == "thrift://127.0.0.1:9083"
    assert settings.conf["spark.sql.warehouse.dir"] == "file:///wh"


def test_two_catalogs_in_one_job_merge_without_clashing():
    hive = config_from_fields({"catalog_name": "hive_prod", "catalog_type": "hive"}, host="thrift://h:9083")
    jdbc = config_from_fields(
        {
            "catalog_name": "pg",
            "catalog_type": "jdbc",
            "warehouse": "/wh",
            "runtime_jar": "/r.jar",
            "extra_jars": "/pg.jar",
        },
        host="jdbc:postgresql://db/c",
        login="u",
        password="p",
    )
    settings = combined_settings([hive, jdbc])
    assert settings.catalog_names == ("hive_prod", "pg")
    assert settings.conf["spark.sql.catalog.hive_prod.type"] == "hive"
    assert settings.conf["spark.sql.catalog.pg.type"] == "jdbc"
    assert settings.conf["spark.sql.extensions"] == ICEBERG_EXTENSIONS
    assert settings.secret_conf == {"spark.sql.catalog.pg.jdbc.password": "p"}
    assert settings.packages == ("org.apache.iceberg:iceberg-spark-runtime-3.5_2.12:1.12.0",)
    assert settings.jars == ("/r.jar", "/pg.jar")


def test_two_connections_with_the_same_catalog_name_are_refused():
    one = config_from_fields({"catalog_name": "c", "catalog_type": "hadoop", "warehouse": "/a"})
    two = config_from_fields({"catalog_name": "c", "catalog_type": "hadoop", "warehouse": "/b"})
    with pytest.raises(CatalogSettingsConflictError, match="both define catalog 'c'"):
        combined_settings([one, two])


def test_a_property_set_twice_is_refused():
    with pytest.raises(InvalidCatalogConfigError, match="'warehouse' is already set"):
        settings_for({"catalog_type": "hadoop", "warehouse": "/a", "catalog_properties": {"warehouse": "/b"}})


@pytest.mark.parametrize(
    ("catalog_type", "extra", "login", "secret_key"),
    [
        # a property name that looks like nothing secret: the Password field decides, not the name
        ("hive", {"password_property": "auth.pwd"}, None, "auth.pwd"),
        ("hive", {"login_property": "auth.pair", "password_property": "auth.pair"}, "user", "auth.pair"),
        ("jdbc", {"password_property": "jdbc.pw", "login_property": "jdbc.user"}, "scott", "jdbc.pw"),
    ],
)
def test_whatever_the_password_fills_is_secret_whatever_its_name(catalog_type, extra, login, secret_key):
    uri = "jdbc:postgresql://db:5432/c" if catalog_type == "jdbc" else "thrift://hms:9083"
    settings = settings_for(
        {"catalog_name": "c", "catalog_type": catalog_type, "warehouse": "file:///wh", **extra},
        host=uri,
        login=login,
        password="SENTINEL-pw",
    )
    assert f"spark.sql.catalog.c.{secret_key}" in settings.secret_conf
    assert "SENTINEL" in settings.secret_conf[f"spark.sql.catalog.c.{secret_key}"]
    assert not any("SENTINEL" in value for value in settings.conf.values())
    if login and extra.get("login_property") != secret_key:
        # a login alone is an identity, not a secret: it may stay on the command line
        assert settings.conf[f"spark.sql.catalog.c.{extra['login_property']}"] == login



def test_two_connections_loading_different_iceberg_runtimes_conflict():
    """A connection saved by the old form keeps ``1.10.2``; one made since follows its line (1.12.0).

    One spark-submit loads one runtime: with both coordinates on ``--packages`` Ivy would evict
    one, so a catalog would silently run the other's Iceberg.
    """
    old = config_from_fields(
        {"catalog_name": "old", "catalog_type": "hadoop", "warehouse": "/a", "iceberg_version": "1.10.2"}
    )
    new = config_from_fields({"catalog_name": "new", "catalog_type": "hadoop", "warehouse": "/b"})
    assert runtime_conflict([old, new]) == (
        "the catalogs load different Iceberg runtimes ('old': "
        "org.apache.iceberg:iceberg-spark-runtime-3.5_2.12:1.10.2; 'new': "
        "org.apache.iceberg:iceberg-spark-runtime-3.5_2.12:1.12.0); one spark-submit loads one runtime "
        "(Ivy would keep one, and a catalog would run the other's Iceberg): give the connections the "
        "same Iceberg version and Spark version"
    )
    same = config_from_fields(
        {"catalog_name": "same", "catalog_type": "hadoop", "warehouse": "/c", "iceberg_version": "1.12.0"}
    )
    assert runtime_conflict([new, same]) is None
    jar = config_from_fields(
        {"catalog_name": "jar", "catalog_type": "hadoop", "warehouse": "/d", "runtime_jar": "/r.jar"}
    )
    assert runtime_conflict([old, jar]) is None  # a jar's contents are not known from its path
