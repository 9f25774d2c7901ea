"""Airflow partition keys (AIP-76) for Iceberg partitions: how a partition value is named, and back.

A commit's asset events carry one key per partition it changed, and an operator given a run's
``partition_key`` turns it back into the rows of that partition. Both directions live here, so
they cannot drift apart. Keys of a time partition are written in the format of the Airflow
partition mapper of the same grain (``StartOfHourMapper``'s ``%Y-%m-%dT%H``,
``StartOfDayMapper``'s ``%Y-%m-%d``, ``%Y-%m``, ``%Y``), so a downstream mapper reads them with
``input_format`` set to that format. Pure Python: the operators use it before Spark starts.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date, datetime, timedelta

from airflow_iceberg.jobs.spec.errors import InvalidSpecError
from airflow_iceberg.jobs.spec.identifiers import quote_column

#: Each time grain and the key format of its Airflow mapper, finest first.
GRAIN_FORMATS = {
    "hour": "%Y-%m-%dT%H",
    "day": "%Y-%m-%d",
    "month": "%Y-%m",
    "year": "%Y",
}
#: Iceberg's time transforms (as its Java API names them) and the grain each one partitions by.
TRANSFORM_GRAINS = {"hour": "hour", "day": "day", "month": "month", "year": "year"}
#: What joins the values of a key built from several partition fields, as ``ProductMapper`` splits it.
KEY_SEPARATOR = "|"
#: The key segment of a NULL partition value (Iceberg's own name for it in partition paths).
NULL_SEGMENT = "null"
_EPOCH = datetime(1970, 1, 1)


def time_key(transform: str, value: object) -> str:
    """The key of one time-partition value, as Iceberg stores it for ``transform``.

    Iceberg stores ``hours`` as hours since 1970, ``months`` as months since 1970-01, ``years``
    as years since 1970; Spark gives ``days`` as a date. None is :data:`NULL_SEGMENT`.
    """
    if value is None:
        return NULL_SEGMENT
    if transform == "hour":
        return (_EPOCH + timedelta(hours=int(value))).strftime(GRAIN_FORMATS["hour"])  # type: ignore[call-overload]
    if transform == "day":
        day = value if isinstance(value, date) else (_EPOCH + timedelta(days=int(value))).date()  # type: ignore[call-overload]
        return day.strftime(GRAIN_FORMATS["day"])
    if transform == "month":
        year, month = divmod(int(value), 12)  # type: ignore[call-overload]
        return f"{1970 + year:04d}-{month + 1:02d}"
    if transform == "year":
        return f"{1970 + int(value):04d}"  # type: ignore[call-overload]
    raise ValueError(f"{transform} is not a time transform")


class UnkeyablePartition(ValueError):
    """A partition value whose key would also name another partition: it gets no key, and no event."""


def value_key(value: object) -> str:
    """The key segment of an identity partition's value: a date as ``%Y-%m-%d``, else its text.

    A timestamp is ``%Y-%m-%dT%H:%M:%S``, with its fraction (``.500000``) when it has one, so two
    instants never share a key. A text that a key could not tell from another partition's is
    refused with :class:`UnkeyablePartition`: one holding :data:`KEY_SEPARATOR` (``region='eu|x',
    country='y'`` would key like ``region='eu', country='x|y'``, and ``ProductMapper`` would split
    it), and the text ``null``, which is NULL's key.
    """
    if value is None:
        return NULL_SEGMENT
    if isinstance(value, datetime):
        return value.strftime("%Y-%m-%dT%H:%M:%S.%f" if value.microsecond else "%Y-%m-%dT%H:%M:%S")
    if isinstance(value, date):
        return value.strftime(GRAIN_FORMATS["day"])
    text = str(value)
    if KEY_SEPARATOR in text:
        raise UnkeyablePartition(f"{text!r} holds {KEY_SEPARATOR!r}, which joins a key's fields")
    if text == NULL_SEGMENT:
        raise UnkeyablePartition(f"the text {text!r} would key like a NULL value")
    return text


@dataclass(frozen=True)
class PartitionRange:
    """The time range a partition key names: ``start`` (inclusive) to ``end`` (exclusive), at ``grain``."""

    key: str
    grain: str
    start: datetime
    end: datetime

    def condition(self, column: str) -> str:
        """A Spark SQL condition selecting the range on ``column`` (a DATE or TIMESTAMP column).

        Its bounds are string literals, which Spark casts to the column's type: a date for a
        DATE column, the wall-clock time for a TIMESTAMP_NTZ one, and the instant in UTC (the
        ``+00:00``) for a TIMESTAMP one, the time Iceberg's ``hours``/``days`` transforms cut it by.
        """
        quoted = quote_column(column, "partition_column")
        return f"{quoted} >= '{_bound(self.start)}' AND {quoted} < '{_bound(self.end)}'"


def _bound(moment: datetime) -> str:
    return moment.strftime("%Y-%m-%d %H:%M:%S+00:00")


def parse_partition_key(key: object, field: str = "partition_key") -> PartitionRange:
    """The range of a time partition key in one of :data:`GRAIN_FORMATS`; a clear error otherwise.

    ``field`` is the parameter the key came from, for the message. A ``CronPartitionTimetable``
    key in its default format (``2024-01-02T05:00:00``) names an instant, not a grain: give the
    timetable ``key_format="%Y-%m-%dT%H"`` (or ``"%Y-%m-%d"``) so its keys say their grain.
    """
    text = str(key).strip() if key is not None else ""
    for grain, fmt in GRAIN_FORMATS.items():
        try:
            start = datetime.strptime(text, fmt)
        except ValueError:
            continue
        if start.strftime(fmt) != text:  # strptime takes "2024-1-2"; a key is written one way only
            continue
        return PartitionRange(key=text, grain=grain, start=start, end=_next(start, grain))
    formats = ", ".join(f"{fmt} ({grain})" for grain, fmt in GRAIN_FORMATS.items())
    raise InvalidSpecError(
        f"{field} {key!r} is not a time partition key: expected one of {formats}, e.g. "
        "'2024-01-02T05' or '2024-01-02' (a CronPartitionTimetable writes keys like that with "
        "key_format='%Y-%m-%dT%H' or key_format='%Y-%m-%d')"
    )


def _next(start: datetime, grain: str) -> datetime:
    if grain == "hour":
        return start + timedelta(hours=1)
    if grain == "day":
        return start + timedelta(days=1)
    if grain == "month":
        return start.replace(year=start.year + start.month // 12, month=start.month % 12 + 1)
    return start.replace(year=start.year + 1)


def partition_condition(
    partition_key: str | None, partition_column: str | None, condition: str | None = None
) -> str | None:
    """``condition`` narrowed to the partition ``partition_key`` names on ``partition_column``.

    ``condition`` as it was when neither is given. A key needs its column, and a key that
    rendered empty, ``'None'`` or None (a run without a partition; None under
    ``render_template_as_native_obj``) is refused rather than taken as "every partition".
    """
    if partition_key is None:
        if partition_column:
            raise InvalidSpecError(
                f"partition_column {partition_column!r} without partition_key: partition_key "
                "rendered None, so this run has no partition key (is the DAG on a "
                "PartitionedAssetTimetable or CronPartitionTimetable?)"
            )
        return condition
    if not partition_column:
        raise InvalidSpecError(
            "partition_key needs partition_column: the DATE or TIMESTAMP column the table is "
            "partitioned by (e.g. 'event_ts' for hours(event_ts))"
        )
    rendered = str(partition_key).strip()
    if rendered in ("", "None"):  # Jinja renders a run without a key as "None"
        raise InvalidSpecError(
            f"partition_key rendered {rendered!r}: this run has no partition key (is the DAG on "
            "a PartitionedAssetTimetable or CronPartitionTimetable?)"
        )
    selected = parse_partition_key(partition_key).condition(partition_column)
    return f"({selected}) AND ({condition})" if condition else selected
