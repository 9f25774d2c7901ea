"""Read Spark event logs (``spark.eventLog.dir``), where a secret must appear redacted only."""

from __future__ import annotations

import re
from pathlib import Path

#: What Spark writes in place of a redacted value (``Utils.REDACTION_REPLACEMENT_TEXT``).
REDACTED = "*********(redacted)"


def event_log_text(directory: Path) -> str:
    """Every event log file in ``directory`` (finished and in-progress ones), joined."""
    files = sorted(path for path in directory.rglob("*") if path.is_file())
    return "".join(path.read_text(errors="replace") for path in files)


def shows_redacted(event_log: str, key: str) -> bool:
    """Whether the log holds ``key`` with its value redacted: ``"key":"…"`` in a map (job and
    stage properties), ``["key","…"]`` in a list (the environment update of Spark 4)."""
    return re.search(rf'"{re.escape(key)}"[:,]"{re.escape(REDACTED)}"', event_log) is not None
