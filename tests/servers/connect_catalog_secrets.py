"""The catalog secrets the suite's Spark Connect server starts with, as a deployment's would.

Over Spark Connect a task never sends a catalog secret per session (Spark would write it in clear
to the server's event log): the server defines ``spark.sql.catalog.<name>.<key>`` itself, and a
task checks it is there. So the shared server (``spark_connect_server``) starts with the secrets
of the test catalogs that have any:

- ``demo``: sentinels in every place a connection keeps secrets (a Password filling the
  harmless-named ``jdbc.pw``, and two Secret properties: S3FileIO's key, since per-task Hadoop
  file-system settings are refused over Connect), which the tests look for everywhere;
- ``rest``: the OAuth2 credential and S3 keys of a SeaweedFS REST catalog started with
  :data:`REST_SECRET_KEY` (the story DAGs' own);
- ``rest_wrong_s3``: the same catalog's OAuth2 credential with a wrong S3 secret key
  (:data:`WRONG_S3_SECRET`), for the test that S3's 403 is named as the root cause.

``spark.redaction.regex`` covers every key, ``jdbc.pw`` included, as the docs tell operators to do.

A catalog whose secrets the server holds connects where the server says: the server also defines
its endpoints (``uri``, ``oauth2-server-uri``, ``s3.endpoint``, ``warehouse``), which a task's
connection must repeat exactly (``operators/connect_secrets.py``). So the server starts with the
REST catalog (:func:`server_conf`'s ``rest``) and ``demo``'s warehouse already known.
"""

from __future__ import annotations

from typing import Any

#: What the connections of catalog ``demo`` carry, by catalog property.
DEMO_SECRETS = {
    "jdbc.pw": "SENTINEL-CONNECT-PW-3f1a",
    "rest.auth.token": "SENTINEL-CONNECT-RAT-8c2e",
    "s3.secret-access-key": "SENTINEL-CONNECT-S3-61bd",
}
#: The S3 secret key (and OAuth2 client secret) of the REST catalog the Connect story DAGs use.
REST_ACCESS_KEY = "iceberg-test"
REST_SECRET_KEY = "c0nnect-rest-9f3e1b"
#: The S3 secret key the server holds for catalog ``rest_wrong_s3``: wrong on purpose.
WRONG_S3_SECRET = "WRONG-S3-SECRET"
REDACTION_REGEX = r"(?i)secret|password|token|access[.-]key|credential|jdbc[.]pw"


def server_conf(rest_catalog: Any, demo_warehouse: str) -> dict[str, str]:
    """The server's own catalog secrets and endpoints, and the redaction pattern that hides the secrets.

    :param rest_catalog: The REST catalog (``SeaweedRestCatalog``) of ``rest`` and ``rest_wrong_s3``.
    :param demo_warehouse: Catalog ``demo``'s warehouse URI.
    """
    rest = {
        "credential": f"{REST_ACCESS_KEY}:{REST_SECRET_KEY}",
        "s3.access-key-id": REST_ACCESS_KEY,
        "s3.secret-access-key": REST_SECRET_KEY,
        "uri": rest_catalog.uri,
        "warehouse": rest_catalog.warehouse,
        "oauth2-server-uri": rest_catalog.oauth2_server_uri,
        "s3.endpoint": rest_catalog.s3_endpoint,
    }
    demo = {**DEMO_SECRETS, "warehouse": demo_warehouse}
    conf = {f"spark.sql.catalog.demo.{key}": value for key, value in demo.items()}
    conf.update({f"spark.sql.catalog.rest.{key}": value for key, value in rest.items()})
    wrong_s3 = {**rest, "s3.secret-access-key": WRONG_S3_SECRET}
    conf.update({f"spark.sql.catalog.rest_wrong_s3.{key}": value for key, value in wrong_s3.items()})
    return {**conf, "spark.redaction.regex": REDACTION_REGEX}
