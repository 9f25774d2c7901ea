"""How many rows a commit added or took out, from its snapshot summary, and when the summary cannot say.

``deleted_records`` is every row the commit took out of the table: the rows of the data files it
removed (Iceberg's ``deleted-records``; copy-on-write counts every row of a rewritten file, and
the kept ones again under ``added-records``) plus the rows it newly marked deleted in position
delete files (merge-on-read, which Iceberg counts as ``added-position-deletes``, never as
``deleted-records``). A deletion vector that replaces an older one for the same data file
repeats the older one's rows, so the rows of removed position deletes are taken off.
``record_count_change`` (``added_records - deleted_records``) is then how many rows the table
gained, or lost when negative, on copy-on-write and merge-on-read alike.

That sum is right only when every row of a removed data file was live. A data file that delete
files had already marked rows in (merge-on-read deletes followed by a copy-on-write merge, or
another engine's equality deletes) counts its dead rows under ``deleted-records`` too, unless
the commit removed those delete files with it and they say exactly which rows were the file's
(a deletion vector, or a position delete file scoped to that one file). And an equality delete
counts keys, not rows. The summary cannot tell these apart, so when a commit removed data files
from a table that had delete files, :func:`unknown_count_reason` reads the commit's manifest
entries (the ``entries`` metadata table at the commit, one small Spark job over metadata, no
data file read) and decides; the counts it cannot vouch for are None, with the reason.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from airflow_iceberg.jobs.spec.identifiers import quote_identifier

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

#: Snapshot-summary counts every write result carries as they are (result key -> Iceberg summary key).
WRITE_SUMMARY_COUNTS = {
    "added_records": "added-records",
    "total_records": "total-records",
    "added_data_files": "added-data-files",
    "deleted_data_files": "deleted-data-files",
    "total_data_files": "total-data-files",
}
#: Why a count is None: the commit added or removed equality deletes, which count keys, not rows.
EQUALITY_DELETES_REASON = (
    "the commit added or removed equality delete files, whose record counts are keys, not rows"
)
#: ``content`` of a manifest entry's file: data, position deletes, equality deletes.
DATA, POSITION_DELETES, EQUALITY_DELETES = 0, 1, 2


def _count(summary: Mapping[str, str], key: str) -> int:
    return int(summary.get(key, 0))


def summary_counts(summary: Mapping[str, str], unknown_reason: str | None = None) -> dict[str, Any]:
    """The counts of a result, from a snapshot summary; ``deleted_records`` and ``record_count_change``
    are None (with ``record_count_unknown`` saying why) when they cannot be told from it."""
    counts: dict[str, Any] = {name: _count(summary, key) for name, key in WRITE_SUMMARY_COUNTS.items()}
    if unknown_reason is None and (
        _count(summary, "added-equality-deletes") or _count(summary, "removed-equality-deletes")
    ):
        unknown_reason = EQUALITY_DELETES_REASON
    if unknown_reason is not None:
        return {
            **counts,
            "deleted_records": None,
            "record_count_change": None,
            "record_count_unknown": unknown_reason,
        }
    marked = _count(summary, "added-position-deletes") - _count(summary, "removed-position-deletes")
    counts["deleted_records"] = _count(summary, "deleted-records") + marked
    counts["record_count_change"] = counts["added_records"] - counts["deleted_records"]
    return counts


def may_count_dead_rows(summary: Mapping[str, str]) -> bool:
    """Whether the commit removed data files from a table that had delete files before it (summary totals)."""
    had = _count(summary, "total-delete-files") - _count(summary, "added-delete-files")
    return _count(summary, "deleted-data-files") > 0 and had + _count(summary, "removed-delete-files") > 0


def unknown_count_reason(spark: SparkSession, table: str, snapshot_id: int) -> str | None:
    """Why the summary's ``deleted-records`` of this commit may hold rows that were deleted already, or None.

    Reads the commit's manifest entries: the data files it removed, the delete files it removed,
    and the delete files it kept. A kept delete file that may apply to a removed data file (a
    position delete file of its partition, or scoped to it; an equality delete file of its
    partition, or a global one, newer than it), or a removed delete file not scoped to one data
    file, makes the count unknowable from metadata alone. Only called when
    :func:`may_count_dead_rows` says the question arises.
    """
    # pyspark is imported here only: the summary helpers above are pure, for the worker too.
    from airflow_iceberg.jobs.scan import with_spark_time_travel

    # Spark 4.1's Iceberg runtime refuses the ``snapshot-id`` option on metadata tables too.
    options = with_spark_time_travel(spark, {"snapshot-id": str(int(snapshot_id))}, int(snapshot_id))
    entries = spark.read.options(**options).table(f"{quote_identifier(table)}.entries")
    fields = set(entries.schema["data_file"].dataType.fieldNames())
    partition = "to_json(data_file.partition)" if "partition" in fields else "'{}'"
    referenced = (
        "data_file.referenced_data_file" if "referenced_data_file" in fields else "CAST(NULL AS STRING)"
    )
    this = int(snapshot_id)
    removed_here, added_here = f"status = 2 AND snapshot_id = {this}", f"status = 1 AND snapshot_id = {this}"
    rows = (
        entries.where(f"({removed_here}) OR (status < 2 AND data_file.content > 0 AND NOT ({added_here}))")
        .selectExpr(
            "status",
            "sequence_number",
            "data_file.content AS content",
            "data_file.file_path AS path",
            "data_file.spec_id AS spec",
            f"{partition} AS partition",
            f"{referenced} AS referenced",
        )
        .collect()
    )
    removed = [r for r in rows if r.status == 2 and r.content == DATA]
    for entry in rows:
        if entry.content == DATA:
            continue
        if entry.status == 2:
            if entry.content == EQUALITY_DELETES or entry.referenced is None:
                return (
                    f"the commit removed delete file {entry.path}, which may mark rows of several data "
                    "files, so its row count is not the rows it had deleted"
                )
        elif any(_applies(entry, data) for data in removed):
            kind = "equality" if entry.content == EQUALITY_DELETES else "position"
            return (
                f"the commit rewrote data files that {kind} delete file {entry.path} may have marked rows "
                "in (merge-on-read deletes, or another engine's equality deletes): their deleted-records "
                "count holds rows that were deleted already, and the summary cannot say how many"
            )
    return None


def _applies(delete: Any, data: Any) -> bool:
    """Whether a kept delete file may mark rows of a removed data file (Iceberg's scoping rules)."""
    if delete.content == POSITION_DELETES:
        if delete.referenced is not None:
            return delete.referenced == data.path
        same_partition = (delete.spec, delete.partition) == (data.spec, data.partition)
        return same_partition and data.sequence_number <= delete.sequence_number
    global_delete = delete.partition in (None, "{}")
    same_partition = global_delete or (delete.spec, delete.partition) == (data.spec, data.partition)
    return same_partition and data.sequence_number < delete.sequence_number
