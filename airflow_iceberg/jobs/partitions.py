"""The partitions a commit changed, as Airflow partition keys, for its asset events (AIP-76).

A commit's changed partitions are those of the files it added and removed, data and delete
files alike: the manifest entries the snapshot itself wrote with status ADDED or DELETED
(``<table>.entries`` at that snapshot). Each file is keyed by its own partition spec, so a
table whose spec evolved keys its old files by the old spec. The key of a partition is built
from the spec's time fields (``hours(ts)`` gives ``2024-01-02T05``, ``days(d)`` ``2024-01-02``;
see :mod:`airflow_iceberg.jobs.spec.partition_keys`; an identity TIMESTAMP field gives its
instant in UTC, ``2024-01-02T05:00:00``); a spec without one is keyed by its identity fields
(``region`` gives ``eu``); ``bucket`` and ``truncate`` never make a key: a downstream run for
"bucket 3" means nothing. Several key fields are joined by ``|``, as Airflow's
``ProductMapper`` splits them. A spec with no key field (unpartitioned, or bucket only) gives no
keys: its commit's event carries none. Each key names one partition: a value that would key like
another partition (text holding ``|``, the text ``null``) gets no key, and is listed instead.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any, NamedTuple

from airflow_iceberg.jobs.spec.identifiers import parse_column, quote_identifier
from airflow_iceberg.jobs.spec.partition_keys import (
    KEY_SEPARATOR,
    TRANSFORM_GRAINS,
    UnkeyablePartition,
    time_key,
    value_key,
)
from airflow_iceberg.jobs.table_state import driver_table

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

#: Partition fields of one spec, in spec order: (partition field name, Iceberg transform name).
SpecFields = Sequence[tuple[str, str]]
#: Spark's ``DESCRIBE TABLE`` names of the time transforms, and Iceberg's (default field suffix too).
_DESCRIBED_TIME = {"hours": "hour", "days": "day", "months": "month", "years": "year"}
_DESCRIBED_RE = re.compile(r"^(?P<transform>\w+)\((?:\d+,\s*)?(?P<column>.+)\)$")
#: ``DESCRIBE TABLE`` spec lookups (Spark Connect) apply to every file, whatever its spec id.
ANY_SPEC = -1


class ChangedPartitions(NamedTuple):
    """The keys of the partitions a commit changed, and the partitions no key can name."""

    keys: list[str]
    #: Each partition without a key, as ``field='value', ...: why``, for the operator's warning.
    unkeyable: list[str]


def changed_partition_keys(spark: SparkSession, table: str, snapshot_id: int) -> list[str]:
    """The keys of the partitions snapshot ``snapshot_id`` of ``table`` changed, sorted, each once."""
    return changed_partitions(spark, table, snapshot_id).keys


def changed_partitions(spark: SparkSession, table: str, snapshot_id: int) -> ChangedPartitions:
    """The partitions snapshot ``snapshot_id`` of ``table`` changed: their keys, sorted, each once."""
    specs = partition_specs(spark, table)
    if not any(specs.values()):
        return ChangedPartitions([], [])  # unpartitioned: no file has a partition to name
    frame = spark.sql(
        "SELECT DISTINCT data_file.spec_id AS spec_id, data_file.partition AS partition "
        f"FROM {quote_identifier(table)}.`entries` VERSION AS OF {int(snapshot_id)} "
        f"WHERE snapshot_id = {int(snapshot_id)} AND status <> 0"
    )
    types = {field.name: field.dataType.typeName() for field in frame.schema["partition"].dataType.fields}
    date_fields = {name for name, kind in types.items() if kind in ("date", "timestamp", "timestamp_ntz")}
    instant_fields = {name for name, kind in types.items() if kind == "timestamp"}
    keys, unkeyable = set(), set()
    for row in frame.collect():
        values = row["partition"].asDict()
        if ANY_SPEC in specs:
            check_of_described_spec(specs[ANY_SPEC], values, int(row["spec_id"]))
        fields = specs.get(int(row["spec_id"]), specs.get(ANY_SPEC, ()))
        try:
            key = partition_key_of(fields, in_utc(values, instant_fields), date_fields)
        except UnkeyablePartition as refused:
            named = ", ".join(f"{name}={value!r}" for name, value in values.items())
            unkeyable.add(f"{named}: {refused}")
            continue
        if key is not None:
            keys.add(key)
    return ChangedPartitions(sorted(keys), sorted(unkeyable))


def check_of_described_spec(described: SpecFields, values: Mapping[str, Any], spec_id: int) -> None:
    """Refuse a file with a partition value for a field the described (current) spec does not name.

    Over Spark Connect the fields come from ``DESCRIBE TABLE`` under Iceberg's default names. A
    file with a value for another field is of an older spec, or its field was renamed from the
    default: the described fields are NULL there, and keying them would report a ``null`` partition.
    """
    named = {name for name, _ in described}
    unnamed = sorted(name for name, value in values.items() if value is not None and name not in named)
    if unnamed:
        raise ValueError(
            f"a file of partition spec {spec_id} has partition fields {', '.join(unnamed)}, which the "
            "current spec as DESCRIBE TABLE shows it does not name (an older spec, or a field renamed "
            "from its default): over Spark Connect its partitions cannot be keyed"
        )


def in_utc(values: dict[str, Any], instant_fields: set[str]) -> dict[str, Any]:
    """``values`` with each TIMESTAMP (with time zone) value as its UTC wall-clock time.

    PySpark gives a TIMESTAMP as a naive datetime in the driver's own time zone (``TZ``), which
    ``astimezone`` reads it in (a repeated hour by its ``fold``); a key names the instant in UTC.
    """
    for name in instant_fields:
        value = values.get(name)
        if isinstance(value, datetime):
            values[name] = value.astimezone(timezone.utc).replace(tzinfo=None)
    return values


def partition_key_of(
    fields: SpecFields,
    values: Mapping[str, Any],
    date_fields: set[str] = frozenset(),  # type: ignore[assignment]
) -> str | None:
    """One partition's key from its spec's fields and values; None if the spec has no key field.

    The key fields are the time fields (a time transform, or an identity partition on a DATE or
    TIMESTAMP column, named in ``date_fields``), else the identity fields.
    """
    timed = [
        (name, t) for name, t in fields if t in TRANSFORM_GRAINS or (t == "identity" and name in date_fields)
    ]
    chosen = timed or [(name, t) for name, t in fields if t == "identity"]
    if not chosen:
        return None
    segments = [
        time_key(t, values.get(name)) if t in TRANSFORM_GRAINS else value_key(values.get(name))
        for name, t in chosen
    ]
    return KEY_SEPARATOR.join(segments)


def partition_specs(spark: SparkSession, table: str) -> dict[int, SpecFields]:
    """Every partition spec of the table by id, from its metadata in the driver.

    A session without a JVM here (Spark Connect) has only ``DESCRIBE TABLE``, which shows the
    current spec alone, by transform and column: the fields then get Iceberg's default names
    (``ts_hour``, ``region``), under :data:`ANY_SPEC`. A field renamed from its default is not
    found in the files' partitions then, and its partitions give no key.
    """
    loaded = driver_table(spark, table)
    if loaded is None:
        return {ANY_SPEC: described_spec(spark, table)}
    return {
        int(spec_id): [(str(field.name()), str(field.transform())) for field in spec.fields()]
        for spec_id, spec in loaded.specs().items()
    }


def described_spec(spark: SparkSession, table: str) -> SpecFields:
    """The current spec's fields as ``DESCRIBE TABLE``'s ``# Partitioning`` section shows them."""
    rows = spark.sql(f"DESCRIBE TABLE {quote_identifier(table)}").collect()
    fields, in_section = [], False
    for row in rows:
        name, text = str(row["col_name"] or "").strip(), str(row["data_type"] or "").strip()
        if name.startswith("#"):
            in_section = name == "# Partitioning"
            continue
        if in_section and name.startswith("Part "):
            fields.append(described_field(text))
    return fields


def described_field(text: str) -> tuple[str, str]:
    """``hours(ts)`` as (``ts_hour``, ``hour``), ``region`` as (``region``, ``identity``), others by kind."""
    match = _DESCRIBED_RE.match(text)
    if match is None:
        return parse_column(text), "identity"
    transform, column = match["transform"], parse_column(match["column"].strip())
    if transform in _DESCRIBED_TIME:
        grain = _DESCRIBED_TIME[transform]
        return f"{column}_{grain}", grain
    return f"{column}_{transform}", transform


def add_partition_keys(spark: SparkSession, commits: Sequence[dict[str, Any] | None]) -> None:
    """Add ``partition_keys`` to each commit on ``main`` in a job's result. Best effort, never raises.

    The commit has happened: a failure here only leaves its keys out, with the reason in
    ``partition_keys_error``, and its asset event then carries no key.
    """
    for commit in commits:
        if not commit or commit.get("snapshot_id") is None or not commit.get("table"):
            continue
        if commit.get("branch") not in (None, "main"):  # an audit branch's commit is announced by its publish
            continue
        try:
            changed = changed_partitions(spark, str(commit["table"]), int(commit["snapshot_id"]))
            commit["partition_keys"] = changed.keys
            if changed.unkeyable:
                commit["unkeyable_partitions"] = changed.unkeyable
        except Exception as error:  # a metadata read that failed after the commit
            commit["partition_keys_error"] = (
                f"{type(error).__name__}: {str(error).splitlines()[0] if str(error) else ''}"
            )
