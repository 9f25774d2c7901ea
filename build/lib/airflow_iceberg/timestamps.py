"""Turn what users put in ``as_of_timestamp`` into the epoch milliseconds Iceberg expects.

Templated values arrive as strings (``{{ data_interval_end }}`` renders as ISO-8601), native
rendering and Python callers give datetimes, and people who copy from Iceberg's docs give
milliseconds. All three are accepted; a naive datetime is taken as UTC, as Airflow's are.
"""

from __future__ import annotations

from datetime import date, datetime, timezone

from airflow_iceberg.exceptions import InvalidSpecError


def to_epoch_millis(value: object, what: str = "as_of_timestamp") -> int | None:
    """Return ``value`` as epoch milliseconds, None for an empty value, or raise naming ``what``."""
    if value is None or (isinstance(value, str) and not value.strip()):
        return None
    if isinstance(value, bool):
        raise InvalidSpecError(f"{what} must be a timestamp, got {value!r}")
    if isinstance(value, int):
        return value
    if isinstance(value, datetime):
        aware = value if value.tzinfo else value.replace(tzinfo=timezone.utc)
        return int(aware.timestamp() * 1000)
    if isinstance(value, date):
        return to_epoch_millis(datetime(value.year, value.month, value.day), what)
    if isinstance(value, str):
        text = value.strip()
        if text.lstrip("-").isdigit():
            return int(text)
        try:
            return to_epoch_millis(datetime.fromisoformat(text.replace("Z", "+00:00")), what)
        except ValueError:
            pass
    raise InvalidSpecError(
        f"{what} must be epoch milliseconds, an ISO-8601 timestamp or a datetime, got {value!r}"
    )


def to_snapshot_id(value: object, what: str = "snapshot_id") -> int | None:
    """Return a snapshot id from an int or a rendered template string; None when empty."""
    if value is None or (isinstance(value, str) and not value.strip()):
        return None
    if isinstance(value, bool):
        raise InvalidSpecError(f"{what} must be an integer snapshot id, got {value!r}")
    if isinstance(value, int):
        return value
    if isinstance(value, str) and value.strip().lstrip("-").isdigit():
        return int(value.strip())
    raise InvalidSpecError(
        f"{what} must be an integer snapshot id, got {value!r}"
        + (" (did the upstream XCom exist?)" if value == "None" else "")
    )
