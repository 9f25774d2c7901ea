"""Spark settings a task's ``conf`` may not hold: they would break what the operators promise.

Two kinds, both refused before Spark starts, naming ``conf``:

- ``spark.sql.iceberg.snapshot-property.<key>`` for a key the provider writes itself (the commit
  id, ``airflow.*``). Iceberg on Spark 4 copies these session settings into the summary of every
  commit the session makes, so a user's value would stamp another task's identity, or one fixed
  commit id, on each commit (compactions included), and a retry would take a commit it never
  made for its own. Other snapshot properties stay the user's to set.
- ``spark.wap.branch`` and ``spark.wap.id``: Iceberg's session-wide write-audit-publish switches.
  They send every write to a branch, or stage it off every branch, behind the operators' back,
  so a retry looks for its commit where it is not and writes again. The operators' own
  ``branch=`` (and :class:`IcebergPublishOperator`) do write-audit-publish instead.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from airflow_iceberg.jobs.spec.request import COMMIT_ID_PROPERTY

SNAPSHOT_PROPERTY_PREFIX = "spark.sql.iceberg.snapshot-property."
#: Snapshot-summary keys the provider writes on every commit (see ``_airflow_identity``).
PROVIDER_SUMMARY_PREFIXES = (COMMIT_ID_PROPERTY, "airflow.")
WAP_SETTINGS = ("spark.wap.branch", "spark.wap.id")


def reserved_conf_problem(conf: Mapping[str, Any] | None) -> str | None:
    """Why ``conf`` cannot be used by an operator, or None."""
    for key in conf or {}:
        name = str(key)
        summary_key = name.removeprefix(SNAPSHOT_PROPERTY_PREFIX)
        if summary_key != name and summary_key.startswith(PROVIDER_SUMMARY_PREFIXES):
            return (
                f"conf {name!r} would stamp the snapshot-summary key {summary_key!r}, which the "
                "provider writes itself to tie each commit to its task (and retries to it), on every "
                "commit of the task; remove it (other snapshot properties may be set)"
            )
        if name in WAP_SETTINGS:
            return (
                f"conf {name!r} redirects every write of the session, so a retry would not find its "
                "commit; use the operator's branch= and IcebergPublishOperator for write-audit-publish"
            )
    return None
