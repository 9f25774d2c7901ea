"""Catalog secrets the cluster holds: a Kubernetes secret mounted into the driver pod.

In Kubernetes cluster deploy mode no file of the Airflow worker reaches the driver pod privately,
so the secrets never leave the cluster: the connection names a Kubernetes secret, the operator
asks Spark to mount it into the driver pod (``spark.kubernetes.driver.secrets.<name>=<dir>``),
and the job reads the mounted directory here. Each key of the secret is one setting:

- a key starting with ``spark.`` is that Spark setting (``spark.hadoop.fs.s3a.secret.key``);
- any other key is a property of the connection's catalog (``credential``, ``jdbc.password``,
  ``s3.secret-access-key``), that is ``spark.sql.catalog.<catalog>.<key>``.

Kubernetes writes each key as a file (a symbolic link into a ``..data`` directory, which it swaps
atomically on update); the dot-prefixed entries are its own and are skipped. The keys are not
known before the pod starts, so the job also adds each one, literally, to
``spark.redaction.regex``, which Spark's event log and UI apply to SparkConf.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping

from airflow_iceberg.jobs.spec.errors import InvalidSpecError

#: Where the operator mounts a catalog's Kubernetes secret in the driver pod (one folder per catalog).
MOUNT_ROOT = "/opt/airflow-iceberg/secrets"
REDACTION_KEY = "spark.redaction.regex"
#: Spark's own default ``spark.redaction.regex``, kept when the application sets none.
SPARK_DEFAULT_REDACTION = "(?i)secret|password|token|access[.]key"


def mount_path(catalog: str) -> str:
    """The folder a catalog's Kubernetes secret is mounted at in the driver pod."""
    return f"{MOUNT_ROOT}/{catalog}"


def read_secret_mount(catalog: str, directory: str) -> dict[str, str]:
    """The Spark settings in a mounted Kubernetes secret of ``catalog`` (see the module docstring)."""
    try:
        names = sorted(name for name in os.listdir(directory) if not name.startswith("."))
    except FileNotFoundError:
        raise InvalidSpecError(
            f"the Kubernetes secret of catalog {catalog} is not mounted at {directory} in the driver "
            "pod: does the secret exist in the driver's namespace?"
        ) from None
    settings = {}
    for name in names:
        path = os.path.join(directory, name)
        if not os.path.isfile(path):
            continue
        with open(path, encoding="utf-8") as handle:
            value = handle.read()
        key = name if name.startswith("spark.") else f"spark.sql.catalog.{catalog}.{name}"
        settings[key] = value.rstrip("\n")
    return settings


def read_secret_mounts(mounts: Mapping[str, str]) -> dict[str, str]:
    """Every catalog's mounted secret, as one dict of Spark settings."""
    settings: dict[str, str] = {}
    for catalog, directory in mounts.items():
        settings.update(read_secret_mount(catalog, directory))
    return settings


def redacting(regex: str | None, keys: Iterable[str]) -> str:
    """``regex`` (Spark's default when None) extended to match each of ``keys`` literally.

    Every character that is not a letter or digit goes in brackets: one literal for Java's regex
    and Python's alike, as the operator writes the keys it knows.
    """
    literal = ["".join(c if c.isalnum() else f"[{c}]" for c in key) for key in sorted(set(keys))]
    if not literal:
        return regex or SPARK_DEFAULT_REDACTION
    return "|".join([f"(?:{regex or SPARK_DEFAULT_REDACTION})", *literal])
