"""Catalog secrets over Spark Connect: the server's own, never sent per session.

A Spark Connect server has no safe place for a secret a task would set on its session. Spark
copies every session SQL setting into the properties of each job it runs
(``SQLExecution.withSQLConfPropagated``), and its event log redacts a job property only when the
key is also in the server's SparkConf (``EventLoggingListener.redactProperties``), which no
client can add to. So a per-session secret would be written in clear to the server's event log,
read by History Servers, and handed to every SparkListener on the server.

A catalog's secrets therefore belong to the server: ``spark.sql.catalog.<name>.<key>`` in its
spark-defaults.conf, with ``spark.redaction.regex`` matching them. Every session inherits them
from SparkConf, where Spark redacts them. A connection says so with ``connect_server_credentials``;
its task then sends only the other settings. Without it, a task whose connections hold secrets
(or whose ``conf`` has a secret-looking key) is refused before a session opens.

The server is the trust boundary. Every client of a server can use the server's catalogs, and
Spark Connect has no per-client authorisation: any client may set any session setting. A task
could therefore aim a catalog whose secrets the server holds at an endpoint of its own (another
``uri``, ``oauth2-server-uri``, ``s3.endpoint``, ``warehouse``), and the server's catalog would
send its secret there. The operators cannot stop a hostile client, but they never do it
themselves: for such a catalog a task sends no endpoint setting, and refuses to run when one it
would have sent differs from the value the server shows (:func:`refuse_redirected_endpoints`).
A deployment with clients it does not trust runs one server per trust domain, or puts an
authenticating proxy in front of it.

The task cannot check that the server has a secret: Spark Connect answers a client's read of a
setting that ``spark.redaction.regex`` matches as if it were unset. What it can see is a secret
the server has *without* redacting it (its UI and event log show it too), and that it refuses.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

from airflow_iceberg.catalog.secret_detection import is_secret_property
from airflow_iceberg.exceptions import InvalidCatalogConfigError

if TYPE_CHECKING:
    import logging

    from airflow_iceberg.catalog.config import CatalogConfig
    from airflow_iceberg.catalog.spark_settings import SparkSettings

DOCS = "docs/spark-connect.md#secrets"
WHY = (
    "a task never sends a secret per session: Spark would write it in clear to the server's event "
    "log (it copies session settings into every job's properties) and hand it to every listener on "
    "the server"
)


#: A catalog property that says where the catalog connects (and so where its secrets go).
ENDPOINT_PROPERTY_RE = re.compile(
    r"(?i)(\A|[._-])(uri|url|endpoint|warehouse|host|proxy|connection[._-]string|access[._-]point|signer)s?"
    r"([._-]|\Z)"
)


def server_held_endpoints(catalog_names: Iterable[str], conf: Iterable[str]) -> list[str]:
    """The keys in ``conf`` that say where a catalog whose secrets the server holds connects.

    :param catalog_names: The catalogs with ``connect_server_credentials`` on.
    :param conf: The settings the task would set on its session.
    """
    prefixes = [f"spark.sql.catalog.{name}." for name in catalog_names]
    return sorted(
        key
        for key in conf
        for prefix in prefixes
        if key.startswith(prefix) and ENDPOINT_PROPERTY_RE.search(key.removeprefix(prefix))
    )


def refuse_redirected_endpoints(
    spark: Any, conf: Mapping[str, str], keys: Iterable[str], log: logging.Logger
) -> None:
    """Refuse, before the task sets anything, an endpoint setting that is not the server's own.

    The task sends none of ``keys``: a catalog whose secrets the server holds connects where the
    server says. Each is read from the fresh session, which holds only the server's settings: a
    value that differs from the task's is refused (the connection is wrong, or aims elsewhere).
    A value the server does not show (unset, or hidden by its ``spark.redaction.regex``, which
    matches values too: an OAuth2 ``.../tokens`` endpoint under Spark's default pattern) cannot
    be compared; it is still not sent, so the server's own value, or none, applies. No value is
    quoted.
    """
    keys = sorted(keys)
    server = {key: spark.conf.get(key, None) for key in keys}
    differ = [key for key in keys if server[key] is not None and server[key] != conf[key]]
    if differ:
        raise InvalidCatalogConfigError(
            f"Spark Connect: the task would set {', '.join(differ)}, which the server defines otherwise, "
            "for a catalog whose secrets the server holds (connect_server_credentials): the server's "
            "secret would go to the endpoint the task names. Give the connection the server's value "
            "(or none), or turn off connect_server_credentials and run the task with a 'spark' "
            f"connection; see {DOCS}"
        )
    unseen = [key for key in keys if server[key] is None]
    if unseen:
        log.info(
            "Spark Connect: the server holds the secrets of %s, so the task does not send them; the "
            "server shows no value for them (unset, or redacted), so its own apply, if it has any",
            ", ".join(unseen),
        )


def user_secret_keys(user_conf: Iterable[str] | None) -> list[str]:
    """The operator's own ``conf`` keys that name a credential: over Connect they are the server's to set."""
    return sorted(str(key) for key in user_conf or () if is_secret_property(str(key)))


def refuse_per_session_secrets(
    configs: Iterable[CatalogConfig], settings: SparkSettings, user_conf: Mapping[str, Any] | None
) -> None:
    """Raise, before any session opens, if the task would need to send a secret to the server."""
    for config in configs:
        prefix = f"spark.sql.catalog.{config.catalog_name}."
        keys = sorted(key for key in settings.secret_conf if key.startswith(prefix))
        if keys and not config.connect_server_credentials:
            raise InvalidCatalogConfigError(
                f"Spark Connect: catalog {config.catalog_name!r} has secret setting(s) {', '.join(keys)}, "
                f"and {WHY}. Define them on the Spark Connect server (spark-defaults.conf, or --conf "
                f"{keys[0]}=..., with spark.redaction.regex matching them) and turn on "
                "connect_server_credentials (Credentials on the Connect server) in the catalog's "
                f"connection, or run this task with a 'spark' connection (spark-submit mode); see {DOCS}"
            )
    keys = user_secret_keys(user_conf)
    if keys:
        raise InvalidCatalogConfigError(
            f"Spark Connect: the operator's conf sets {', '.join(keys)}, which looks like a secret, and "
            f"{WHY}. Define it on the Spark Connect server and remove it from conf, or run this task "
            f"with a 'spark' connection (spark-submit mode); see {DOCS}"
        )


def check_server_secrets(spark: Any, secret_keys: Iterable[str], log: logging.Logger) -> None:
    """Refuse a secret the server would show in clear; log which secrets the task relies on.

    A value read back means ``spark.redaction.regex`` misses the key on the server, whose UI and
    event log then show it as well. The value is compared with nothing, kept nowhere, never logged.
    """
    keys = sorted(set(secret_keys))
    shown = [key for key in keys if spark.conf.get(key, None) is not None]
    if shown:
        raise InvalidCatalogConfigError(
            f"Spark Connect: the server shows its {', '.join(shown)} to any client, so its "
            "spark.redaction.regex does not match it, and its UI and event log show it in clear too; "
            f"add the key to the server's spark.redaction.regex; see {DOCS}"
        )
    if keys:
        log.info(
            "Spark Connect: the task sends no secret; the server must define %s (Spark Connect does "
            "not let a client read a redacted setting back, so this is not checked)",
            ", ".join(keys),
        )
