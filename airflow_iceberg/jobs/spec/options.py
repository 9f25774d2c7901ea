"""Spark and Iceberg option maps (read, write, source, rewrite options; table properties).

Option values reach Spark as data (``.option(k, v)``), never spliced into SQL, so only keys are
checked for form; the values of the Iceberg options whose type is known are checked too, so a
typo fails before Spark starts instead of as a Java stack trace or a silent ``false``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from airflow_iceberg.jobs.spec.errors import InvalidSpecError
from airflow_iceberg.jobs.spec.identifiers import PROPERTY_KEY_RE

#: File formats Iceberg itself writes (the ``write-format`` write option).
ICEBERG_WRITE_FORMATS = ("parquet", "avro", "orc")
#: Iceberg's ``isolation-level`` write option values.
ISOLATION_LEVELS = ("serializable", "snapshot")
#: Iceberg option values Iceberg parses as numbers or booleans: checked here so a typo fails before
#: Spark starts, instead of as a NumberFormatException (or, for booleans, silently as ``false``).
_INTEGER_OPTIONS = frozenset({
    "split-size", "lookback", "file-open-cost", "batch-size", "streaming-max-files-per-micro-batch",
    "streaming-max-rows-per-micro-batch", "target-file-size-bytes", "validate-from-snapshot-id",
})
_BOOLEAN_OPTIONS = frozenset({
    "vectorization-enabled", "streaming-skip-delete-snapshots", "streaming-skip-overwrite-snapshots",
    "locality", "check-nullability", "fanout-enabled", "check-ordering",
})
_CHOICE_OPTIONS = {"write-format": ICEBERG_WRITE_FORMATS, "isolation-level": ISOLATION_LEVELS}


def validate_options(options: Mapping[str, object] | None, what: str) -> dict[str, str]:
    """Return the options as a ``str -> str`` dict with validated keys.

    Values are passed to Spark as data (``.option(k, v)``), never spliced into SQL, so only keys
    need checking. Booleans become ``true``/``false`` the way Spark expects them.
    """
    result: dict[str, str] = {}
    for key, value in (options or {}).items():
        if not isinstance(key, str) or not PROPERTY_KEY_RE.match(key):
            raise InvalidSpecError(f"{what} key {key!r} is not valid: use letters, digits, '.', '-' and '_'")
        if value is None:
            raise InvalidSpecError(f"{what} {key!r} has no value")
        result[key] = str(value).lower() if isinstance(value, bool) else str(value)
    return result


def check_iceberg_option_values(options: Mapping[str, str], what: str) -> None:
    """Check the values of the Iceberg read/write options whose type is known.

    Iceberg reads numbers with ``Long.parseLong`` (a typo becomes a Java stack trace mid-job) and
    booleans with ``Boolean.parseBoolean`` (a typo silently becomes ``false``), so both are
    checked here, with a message that names the option.
    """
    for key, value in options.items():
        name = key.lower()
        if name in _INTEGER_OPTIONS and not re.fullmatch(r"[0-9]+", value):
            raise InvalidSpecError(f"{what} {key!r} must be a non-negative integer, got {value!r}")
        if name in _BOOLEAN_OPTIONS and value.lower() not in ("true", "false"):
            raise InvalidSpecError(f"{what} {key!r} must be 'true' or 'false', got {value!r}")
        if name in _CHOICE_OPTIONS and value.lower() not in _CHOICE_OPTIONS[name]:
            choices = ", ".join(_CHOICE_OPTIONS[name])
            raise InvalidSpecError(f"{what} {key!r} must be one of {choices}, got {value!r}")


def option_value(options: Mapping[str, str], key: str) -> str | None:
    """Look an option up the way Spark does: option keys are case-insensitive."""
    for name, value in options.items():
        if name.lower() == key:
            return value
    return None


def reject_reserved_options(options: Mapping[str, str], reserved: Mapping[str, str], what: str) -> None:
    for key in options:
        if key.lower() in reserved:
            field_name = reserved[key.lower()]
            raise InvalidSpecError(f"{what} {key!r} is not allowed here: use the {field_name!r} field")
