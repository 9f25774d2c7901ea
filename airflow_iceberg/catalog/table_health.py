"""Decide from a table's metadata which upkeep it needs, the way Iceberg's own procedures would.

Daily compaction of a table nobody wrote to is wasted cluster time, and every rewrite moves
``main`` under the audit branches waiting to be published. So before the upkeep runs, its need is
read from the table's metadata with pyiceberg: the manifests of one snapshot (data and delete
files, their sizes and record counts), the manifest list, and the snapshot log and refs. No data
file is opened and no Spark application starts.

Each decision mirrors the rule of the procedure it stands for, with the procedure's own options
and defaults, so "not needed" means the procedure would find nothing to do:

- ``rewrite_data_files``: Iceberg's bin-pack planner (``BinPackRewriteFilePlanner``). Per
  partition of the current spec (the files of older specs form one group, as Iceberg groups
  them), the candidates are the files outside ``[min-file-size-bytes, max-file-size-bytes]``
  (75% and 180% of ``target-file-size-bytes``, itself the table's ``write.target-file-size-bytes``,
  512 MiB by default), with ``delete-file-threshold`` delete files or more, or whose file-scoped
  deletes remove ``delete-ratio-threshold`` (0.3) of their rows. They are packed into groups of
  ``max-file-group-size-bytes`` (100 GB), and a group is rewritten when its files are at least
  ``min-input-files`` (5) and more than one, or more than one and larger together than the
  target, or larger than the maximum, or one of them has a delete problem. ``rewrite-all``
  rewrites every file selected. The ``where`` is read case-insensitively, as Spark reads it.
- ``rewrite_position_delete_files``: the same size rules over the snapshot's live position-delete
  files in the partitions the ``where`` projects to (the planner's ``baseTableFilter``: by
  partition only; dangling deletes included), ``write.delete.target-file-size-bytes`` (64 MiB)
  by default. On a v3 table with deletion vectors only, Iceberg's action returns at once.
- ``expire_snapshots``: Iceberg's ``RemoveSnapshots``: refs other than ``main`` past their
  max-ref-age go first; a remaining tag keeps its snapshot; a branch keeps its newest ancestors,
  its own ``min-snapshots-to-keep`` (else ``retain_last``) and those younger than its own
  ``max-snapshot-age-ms`` (else ``older_than``), and the rest of its ancestry goes even when
  younger than ``older_than``; a snapshot no ref reaches goes when older than ``older_than``.
- ``rewrite_manifests`` has no planner in Iceberg (it regroups every manifest of the current
  spec), so this step alone is a threshold of this check's own: needed from ``max_manifests``
  data manifests (100 by default). Below it the procedure would still regroup them: "not
  needed" means "not worth it" here, not "nothing to do".

Known limits: pyiceberg (0.12) cannot match a deletion vector to its data file, so each vector
counts against every data file of its partition (the delete rules err towards "needed"); tables
with equality deletes cannot be judged for the rewrites (a clear error); and a ref or snapshot
crossing an age limit between the check and the procedure is judged at the check's time.

Orphan files are, by definition, in no metadata: only a listing of the table's location finds them,
which is what ``remove_orphan_files`` does. So they are not judged here.

Pure pyiceberg over a loaded table: no Airflow, no Spark; the operator
(:class:`airflow_iceberg.operators.health.IcebergTableHealthOperator`) loads the table and branches.
"""

from __future__ import annotations

import re
import time
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from airflow_iceberg.exceptions import InvalidSpecError
from airflow_iceberg.timestamps import to_epoch_millis

STEPS = ("rewrite_data_files", "rewrite_position_delete_files", "expire_snapshots", "rewrite_manifests")

MIB = 1024 * 1024
#: Iceberg's defaults (TableProperties, SizeBasedFileRewritePlanner, BinPackRewriteFilePlanner).
DATA_TARGET_DEFAULT = 512 * MIB
DELETE_TARGET_DEFAULT = 64 * MIB
MIN_INPUT_FILES_DEFAULT = 5
DELETE_RATIO_THRESHOLD_DEFAULT = 0.3
RETAIN_LAST_DEFAULT = 1
MAX_SNAPSHOT_AGE_MS_DEFAULT = 5 * 24 * 3600 * 1000  # history.expire.max-snapshot-age-ms
MAX_MANIFESTS_DEFAULT = 100
MAX_FILE_GROUP_SIZE_DEFAULT = 100 * 1024 * MIB  # SizeBasedFileRewritePlanner, 100 GB
MAX_REF_AGE_MS_DEFAULT = 2**63 - 1  # history.expire.max-ref-age-ms: Long.MAX_VALUE
#: The field id of a position-delete file's ``file_path`` column (Iceberg's MetadataColumns).
DELETE_FILE_PATH_FIELD_ID = 2147483546

#: The rewrite options the decision reads (the procedures' own names); others are passed over.
REWRITE_OPTIONS = (
    "min-input-files",
    "target-file-size-bytes",
    "min-file-size-bytes",
    "max-file-size-bytes",
    "delete-file-threshold",
    "delete-ratio-threshold",
    "rewrite-all",
    "max-file-group-size-bytes",
    "max-file-group-input-files",
)
#: Spark's typed literals, which pyiceberg's filter parser does not know: DATE'2024-01-02' is read
#: as '2024-01-02', which pyiceberg casts to the column's type, as Spark does.
#: A quoted string is matched first and kept whole, so ``note = 'UP TO DATE'`` keeps its word.
_TYPED_LITERAL = re.compile(
    r"('(?:[^'\\]|\\.|'')*')|\b(?:DATE|TIMESTAMP(?:_NTZ|_LTZ)?)\s*(?=')", re.IGNORECASE
)


@dataclass(frozen=True)
class SizeRules:
    """One rewrite's size rules, resolved from its options and the table's properties."""

    target: int
    min_size: int
    max_size: int
    min_input_files: int
    delete_file_threshold: int | None
    delete_ratio_threshold: float
    rewrite_all: bool = False
    max_group_size: int = MAX_FILE_GROUP_SIZE_DEFAULT
    max_group_files: int | None = None

    @classmethod
    def resolve(cls, options: Mapping[str, Any], default_target: int) -> SizeRules:
        def number(key: str, default: Any, kind: type = int) -> Any:
            value = options.get(key)
            if value is None or value == "":
                return default
            try:
                result = kind(value)
            except (TypeError, ValueError):
                raise InvalidSpecError(f"option {key} must be a number, got {value!r}") from None
            if result < 0:
                raise InvalidSpecError(f"option {key} must not be negative, got {value!r}")
            return result

        target = number("target-file-size-bytes", default_target)
        return cls(
            target=target,
            min_size=number("min-file-size-bytes", int(target * 0.75)),
            max_size=number("max-file-size-bytes", int(target * 1.8)),
            min_input_files=number("min-input-files", MIN_INPUT_FILES_DEFAULT),
            delete_file_threshold=number("delete-file-threshold", None),
            delete_ratio_threshold=number("delete-ratio-threshold", DELETE_RATIO_THRESHOLD_DEFAULT, float),
            # Java's Boolean.parseBoolean: "true" in any case, anything else false.
            rewrite_all=str(options.get("rewrite-all", "false")).strip().lower() == "true",
            max_group_size=number("max-file-group-size-bytes", MAX_FILE_GROUP_SIZE_DEFAULT),
            # Iceberg 1.11's cap on a group's files (1.10 refuses the option).
            max_group_files=number("max-file-group-input-files", None),
        )

    def file_groups(self, sizes: list[int]) -> list[list[int]]:
        """A partition's candidates packed into groups of at most ``max-file-group-size-bytes``.

        Iceberg's ``BinPacking.ListPacker`` with a lookback of 1, as ``planFileGroups`` calls it:
        one open group; a file that does not fit closes it and opens the next. (The files come
        in the order the manifests list them, as they do for Iceberg's scan.)
        """
        groups: list[list[int]] = []
        for size in sizes:
            room = self.max_group_files is None or len(groups[-1] if groups else ()) < self.max_group_files
            if groups and room and sum(groups[-1]) + size <= self.max_group_size:
                groups[-1].append(size)
            else:
                groups.append([size])
        return groups

    def group_needs_rewrite(self, sizes: list[int], delete_problem: bool) -> str | None:
        """Why a partition's candidate files would be rewritten, or None (Iceberg's filterFileGroups)."""
        count, total = len(sizes), sum(sizes)
        if count > 1 and count >= self.min_input_files:
            return f"{count} files to rewrite (min-input-files {self.min_input_files})"
        if count > 1 and total > self.target:
            return f"{count} files of {total} bytes together, more than the target {self.target}"
        if total > self.max_size:
            return f"{total} bytes, more than the largest file wanted ({self.max_size})"
        if delete_problem:
            return "a file with too many deletes"
        return None


def spark_filter_for_pyiceberg(where: str | None) -> str | None:
    """The ``where`` of a rewrite, as pyiceberg's filter parser reads it (typed literals untyped)."""
    return _TYPED_LITERAL.sub(lambda m: m.group(1) or "", where) if where else where


def head_snapshot(table: Any, branch: str | None) -> Any:
    """The snapshot at the head of ``branch`` (``main`` when None); None for a table without one."""
    if not branch or branch == "main":
        return table.current_snapshot()
    ref = table.metadata.refs.get(branch)
    if ref is None or ref.snapshot_ref_type.value != "branch":
        raise InvalidSpecError(
            f"branch {branch!r} does not exist in the table (its refs: {sorted(table.metadata.refs)})"
        )
    return table.snapshot_by_id(ref.snapshot_id)


def _partition_key(file: Any) -> tuple:
    partition = file.partition
    values = tuple(partition) if partition is not None else ()
    return (file.spec_id, values)


def _partition_label(table: Any, key: tuple) -> str:
    """``name=value/...`` with each value as Iceberg shows it (``2024-01-01``, not days since 1970)."""
    spec_id, values = key
    spec = table.specs().get(spec_id)
    if spec is None or not spec.fields:
        return "(unpartitioned)"
    schema = table.schema()
    parts = []
    for field, value in zip(spec.fields, values, strict=False):
        try:
            shown = field.transform.to_human_string(schema.find_type(field.source_id), value)
        except Exception:  # a source column since dropped, or a transform pyiceberg cannot show
            shown = str(value)
        parts.append(f"{field.name}={shown}")
    return "/".join(parts)


def _file_scoped(delete_file: Any) -> bool:
    """Whether a position-delete file names one data file only (Iceberg's ContentFileUtil.isFileScoped).

    Its ``referenced_data_file`` says so (always, for a deletion vector), or its file_path bounds are equal.
    """
    if getattr(delete_file, "referenced_data_file", None) or _delete_format(delete_file) == "PUFFIN":
        return True
    lower = (delete_file.lower_bounds or {}).get(DELETE_FILE_PATH_FIELD_ID)
    upper = (delete_file.upper_bounds or {}).get(DELETE_FILE_PATH_FIELD_ID)
    return lower is not None and lower == upper


def _delete_format(delete_file: Any) -> str:
    return str(getattr(delete_file.file_format, "value", delete_file.file_format)).upper()


def _is_position_delete(delete_file: Any) -> bool:
    return getattr(delete_file.content, "value", delete_file.content) == 1


def where_expression(table: Any, where: str | None) -> Any:
    """``where`` as a pyiceberg expression, checked against the table's columns (any case, as Spark)."""
    from pyiceberg.expressions import AlwaysTrue
    from pyiceberg.expressions.parser import parse
    from pyiceberg.expressions.visitors import bind

    if not where:
        return AlwaysTrue()
    try:
        expression = parse(spark_filter_for_pyiceberg(where))
        bind(table.schema(), expression, case_sensitive=False)
    except Exception as error:  # pyiceberg's parser and binder raise several kinds
        raise InvalidSpecError(f"where {where!r} cannot be read as a filter of the table: {error}") from error
    return expression


def planned_files(table: Any, snapshot: Any, where: str | None) -> list[Any]:
    """The scan tasks (data file and its deletes) of ``snapshot`` that ``where`` selects: manifests only."""
    scan = table.scan(
        row_filter=where_expression(table, where),
        snapshot_id=snapshot.snapshot_id,
        # Spark's rewrite procedures resolve columns as spark.sql.caseSensitive says: false by default.
        case_sensitive=False,
    )
    try:
        return list(scan.plan_files())
    except ValueError as error:
        if "equality deletes" not in str(error):
            raise
        raise InvalidSpecError(
            "the table has equality delete files, which pyiceberg cannot match to data files, so the "
            "rewrites cannot be judged from metadata: leave rewrite_data_files and "
            "rewrite_position_delete_files out of the health check's steps"
        ) from error


def live_position_deletes(table: Any, snapshot: Any, where: str | None) -> list[Any]:
    """The live position-delete files of ``snapshot`` in the partitions ``where`` may select.

    As the position-delete planner reads them (the ``position_deletes`` table with
    ``baseTableFilter``): every live one, also those whose data files are gone, selected by the
    where's projection on each file's partition only, not by the data files' column bounds.
    """
    from pyiceberg.expressions.visitors import expression_evaluator, inclusive_projection
    from pyiceberg.schema import Schema

    expression, schema, specs = where_expression(table, where), table.schema(), table.specs()
    evaluators: dict[int, Any] = {}

    def selected(delete_file: Any) -> bool:
        spec_id = delete_file.spec_id
        if spec_id not in evaluators:
            spec = specs[spec_id]
            partition_schema = Schema(*spec.partition_type(schema).fields)
            projected = inclusive_projection(schema, spec, False)(expression)
            evaluators[spec_id] = expression_evaluator(partition_schema, projected, False)
        return evaluators[spec_id](delete_file.partition)

    files = []
    for manifest in snapshot.manifests(table.io):
        if getattr(manifest.content, "value", manifest.content) != 1:  # delete manifests only
            continue
        for entry in manifest.fetch_manifest_entry(table.io, discard_deleted=True):
            if _is_position_delete(entry.data_file) and selected(entry.data_file):
                files.append(entry.data_file)
    return files


def task_deletes(task: Any) -> list[Any]:
    """The delete files that may apply to the task's data file.

    pyiceberg (0.12) matches a delete file to data files by its file_path bounds only, and reads
    manifests with the v2 schema, so a deletion vector (no bounds; its data file is in the v3-only
    ``referenced_data_file``) is matched to every data file of its partition. Each is then counted
    as file-scoped against each of them: the delete rules can only err towards "needed", never
    skip a rewrite Iceberg would make. Where ``referenced_data_file`` is read, it is used.
    """
    path = task.file.file_path
    return [
        d
        for d in task.delete_files or ()
        if not getattr(d, "referenced_data_file", None) or d.referenced_data_file == path
    ]


def _delete_identity(delete_file: Any) -> tuple:
    """A delete file's identity: deletion vectors share a Puffin file, told apart by their offsets."""
    return (delete_file.file_path, getattr(delete_file, "content_offset", None))


def _deleted_records(task: Any) -> int:
    """Rows of the task's data file that its file-scoped position deletes remove (as Iceberg counts)."""
    scoped = sum(d.record_count for d in task_deletes(task) if _is_position_delete(d) and _file_scoped(d))
    return min(scoped, task.file.record_count)


def _delete_problem(rules: SizeRules, task: Any) -> bool:
    """Iceberg's tooManyDeletes or tooHighDeleteRatio for one data file."""
    deletes = task_deletes(task)
    if rules.delete_file_threshold is not None and len(deletes) >= rules.delete_file_threshold:
        return True
    records = task.file.record_count
    return bool(deletes) and records > 0 and _deleted_records(task) / records >= rules.delete_ratio_threshold


def _judge(table: Any, rules: SizeRules, candidates: Mapping[tuple, list[tuple[int, bool]]]) -> dict:
    """Partition label -> why its candidate files would be rewritten, for those that would be.

    ``candidates`` holds each partition's (size, has a delete problem) files; they are packed into
    groups (``max-file-group-size-bytes``) and each group is judged alone, as Iceberg does.
    """
    verdicts = {}
    for key, files in candidates.items():
        if not files:
            continue
        if rules.rewrite_all:
            verdicts[_partition_label(table, key)] = f"{len(files)} files (rewrite-all)"
            continue
        problem_of = dict(enumerate(problem for _, problem in files))
        groups = rules.file_groups([size for size, _ in files])
        reasons, index = [], 0
        for group in groups:
            problem = any(problem_of[i] for i in range(index, index + len(group)))
            index += len(group)
            reason = rules.group_needs_rewrite(group, problem)
            if reason:
                reasons.append(reason)
        if reasons:
            more = f" (in {len(reasons)} of {len(groups)} file groups)" if len(groups) > 1 else ""
            verdicts[_partition_label(table, key)] = reasons[0] + more
    return verdicts


def data_files_decision(
    table: Any,
    snapshot: Any,
    where: str | None,
    options: Mapping[str, Any],
    delete_options: Mapping[str, Any],
) -> dict:
    """Measure the files ``where`` selects in ``snapshot``; decide their compaction and their deletes'."""
    properties = table.metadata.properties
    rules = SizeRules.resolve(
        options, int(properties.get("write.target-file-size-bytes", DATA_TARGET_DEFAULT))
    )
    delete_rules = SizeRules.resolve(
        delete_options, int(properties.get("write.delete.target-file-size-bytes", DELETE_TARGET_DEFAULT))
    )
    tasks = planned_files(table, snapshot, where)

    current_spec = table.spec()
    #: Iceberg's groupByPartition: a file of an older spec may hold rows of several partitions
    #: of the current one, so all such files form one group, keyed by an all-null partition.
    older_specs_key = (current_spec.spec_id, (None,) * len(current_spec.fields))
    candidates: dict[tuple, list[tuple[int, bool]]] = defaultdict(list)
    deletes_by_partition: dict[tuple, dict[tuple, int]] = defaultdict(dict)
    for task in tasks:
        size = task.file.file_size_in_bytes
        key = _partition_key(task.file) if task.file.spec_id == current_spec.spec_id else older_specs_key
        for delete in task_deletes(task):
            if _is_position_delete(delete):
                identity = _delete_identity(delete)
                deletes_by_partition[_partition_key(delete)][identity] = delete.file_size_in_bytes
        problem = _delete_problem(rules, task)
        if rules.rewrite_all or problem or not rules.min_size <= size <= rules.max_size:
            candidates[key].append((size, problem))
    position_deletes = live_position_deletes(table, snapshot, where)
    delete_candidates: dict[tuple, list[tuple[int, bool]]] = defaultdict(list)
    for delete in position_deletes:
        size = delete.file_size_in_bytes
        if delete_rules.rewrite_all or not delete_rules.min_size <= size <= delete_rules.max_size:
            delete_candidates[_partition_key(delete)].append((size, False))
    delete_rewrite = {
        partition: reason.replace("files", "delete files", 1)
        for partition, reason in _judge(table, delete_rules, delete_candidates).items()
    }
    if table.metadata.format_version >= 3 and not any(
        _delete_format(d) != "PUFFIN" for d in position_deletes
    ):
        # RewritePositionDeleteFilesSparkAction: on v3 it rewrites only to turn v2 position-delete
        # files into deletion vectors; with vectors only, it returns at once.
        delete_rewrite = {}

    data_records = sum(task.file.record_count for task in tasks)
    deleted_records = sum(_deleted_records(task) for task in tasks)
    measured = {
        "data_files": len(tasks),
        "small_data_files": sum(task.file.file_size_in_bytes < rules.min_size for task in tasks),
        "partitions": len({_partition_key(task.file) for task in tasks}),
        "data_records": data_records,
        # Those applying to the files judged, and all live ones the delete rewrite would plan.
        "position_delete_files": sum(len(files) for files in deletes_by_partition.values()),
        "live_position_delete_files": len(position_deletes),
        "deleted_records": deleted_records,
        "deleted_ratio": round(deleted_records / data_records, 4) if data_records else 0.0,
        "min_file_size_bytes": rules.min_size,
    }
    healthy = f"no partition has files Iceberg's bin-pack planner would rewrite ({len(tasks)} files read)"
    return {
        "measured": measured,
        "rewrite_data_files": _decision(_judge(table, rules, candidates), healthy),
        "rewrite_position_delete_files": _decision(
            delete_rewrite, "no partition has position-delete files to compact"
        ),
    }


def _decision(partitions: Mapping[str, str], healthy: str) -> dict:
    if not partitions:
        return {"needed": False, "reason": healthy, "partitions": {}}
    shown = ", ".join(f"{name}: {why}" for name, why in list(partitions.items())[:5])
    more = f" and {len(partitions) - 5} more" if len(partitions) > 5 else ""
    return {
        "needed": True,
        "reason": f"{len(partitions)} partition(s) need it: {shown}{more}",
        "partitions": dict(partitions),
    }


def expired_refs(table: Any, now_ms: int) -> list[str]:
    """The refs ``RemoveSnapshots`` drops: any but ``main`` older than its max-ref-age, or dangling."""
    metadata = table.metadata
    default = int(metadata.properties.get("history.expire.max-ref-age-ms", MAX_REF_AGE_MS_DEFAULT))
    by_id = {s.snapshot_id: s for s in metadata.snapshots}
    gone = []
    for name, ref in metadata.refs.items():
        if name == "main":
            continue
        snapshot = by_id.get(ref.snapshot_id)
        max_age = ref.max_ref_age_ms if ref.max_ref_age_ms is not None else default
        if snapshot is None or now_ms - snapshot.timestamp_ms > max_age:
            gone.append(name)
    return sorted(gone)


def expirable_snapshots(
    table: Any, older_than_ms: int, retain_last: int, now_ms: int | None = None
) -> list[int]:
    """The snapshots ``expire_snapshots(older_than, retain_last)`` would remove (as RemoveSnapshots does).

    As ``RemoveSnapshots.internalApply``: the refs past their max-ref-age go first; a remaining
    tag keeps its snapshot; a remaining branch keeps its newest ancestors, at least its
    ``min-snapshots-to-keep`` (else ``retain_last``) and every one younger than its own
    ``max-snapshot-age-ms`` (else ``older_than``), and the rest of its ancestry goes even when
    younger than ``older_than``; a snapshot no ref reaches goes when older than ``older_than``.
    """
    now = now_ms if now_ms is not None else int(time.time() * 1000)
    metadata = table.metadata
    by_id = {s.snapshot_id: s for s in metadata.snapshots}
    removed_refs = set(expired_refs(table, now))
    retained: set[int] = set()
    referenced: set[int] = set()
    for name, ref in metadata.refs.items():
        if name in removed_refs:
            continue
        retained.add(ref.snapshot_id)
        referenced.add(ref.snapshot_id)
        if ref.snapshot_ref_type.value == "tag":
            continue
        keep = ref.min_snapshots_to_keep if ref.min_snapshots_to_keep is not None else retain_last
        max_age = ref.max_snapshot_age_ms
        cutoff = now - max_age if max_age is not None else older_than_ms
        kept: set[int] = set()
        keeping, snapshot = True, by_id.get(ref.snapshot_id)
        while snapshot is not None:
            referenced.add(snapshot.snapshot_id)
            if keeping and (len(kept) < keep or snapshot.timestamp_ms >= cutoff):
                kept.add(snapshot.snapshot_id)
            else:
                keeping = False
            parent = snapshot.parent_snapshot_id
            snapshot = by_id.get(parent) if parent is not None else None
        retained |= kept
    retained |= {
        s.snapshot_id
        for s in metadata.snapshots
        if s.snapshot_id not in referenced and s.timestamp_ms >= older_than_ms
    }
    return [s.snapshot_id for s in metadata.snapshots if s.snapshot_id not in retained]


def manifests_decision(table: Any, snapshot: Any, max_manifests: int) -> dict:
    manifests = list(snapshot.manifests(table.io))
    data = [m for m in manifests if getattr(m.content, "value", m.content) == 0]
    measured = {
        "data_manifests": len(data),
        "delete_manifests": len(manifests) - len(data),
        "manifest_bytes": sum(m.manifest_length for m in manifests),
    }
    if len(data) >= max_manifests:
        decision = {"needed": True, "reason": f"{len(data)} data manifests (max_manifests {max_manifests})"}
    else:
        decision = {"needed": False, "reason": f"{len(data)} data manifests, fewer than {max_manifests}"}
    return {"measured": measured, "rewrite_manifests": decision}


def assess(
    table: Any,
    *,
    branch: str | None = None,
    where: str | None = None,
    options: Mapping[str, Any] | None = None,
    delete_options: Mapping[str, Any] | None = None,
    older_than: Any = None,
    retain_last: int | None = None,
    max_manifests: int | None = None,
    steps: Iterable[str] = STEPS,
) -> dict[str, Any]:
    """The table's health report: what was measured, and for each step whether it is needed and why.

    ``options`` are the data rewrite's own options (``min-input-files`` ...), ``delete_options``
    the position-delete rewrite's, ``older_than`` and
    ``retain_last`` the expiry's (the default: the table's ``history.expire.max-snapshot-age-ms``,
    5 days, before now, and 1).
    """
    steps = tuple(steps)
    unknown = sorted(set(steps) - set(STEPS))
    if unknown:
        raise InvalidSpecError(f"unknown upkeep step(s) {unknown}; the steps are {list(STEPS)}")
    options = dict(options or {})
    snapshot = head_snapshot(table, branch)
    report: dict[str, Any] = {
        "table": ".".join(table.name()) if hasattr(table, "name") else None,
        "branch": branch or "main",
        "snapshot_id": snapshot.snapshot_id if snapshot else None,
        "measured": {"snapshots": len(table.metadata.snapshots)},
        "steps": {},
    }
    if snapshot is None:
        for step in steps:
            report["steps"][step] = {"needed": False, "reason": "the table has no snapshot yet"}
        return report
    if {"rewrite_data_files", "rewrite_position_delete_files"} & set(steps):
        files = data_files_decision(table, snapshot, where, options, dict(delete_options or {}))
        report["measured"].update(files["measured"])
        for step in ("rewrite_data_files", "rewrite_position_delete_files"):
            if step in steps:
                report["steps"][step] = files[step]
    if "expire_snapshots" in steps:
        properties = table.metadata.properties
        default_age = int(properties.get("history.expire.max-snapshot-age-ms", MAX_SNAPSHOT_AGE_MS_DEFAULT))
        cutoff = to_epoch_millis(older_than, "older_than")
        cutoff = cutoff if cutoff is not None else int(time.time() * 1000) - default_age
        keep = (
            retain_last
            if retain_last is not None
            else int(properties.get("history.expire.min-snapshots-to-keep", RETAIN_LAST_DEFAULT))
        )
        now = int(time.time() * 1000)
        expirable = expirable_snapshots(table, cutoff, keep, now)
        refs = expired_refs(table, now)
        snapshots = table.metadata.snapshots
        report["measured"]["oldest_snapshot_ms"] = min(s.timestamp_ms for s in snapshots)
        report["measured"]["expirable_snapshots"] = len(expirable)
        report["measured"]["expired_refs"] = refs
        if expirable or refs:
            dropped = f", and refs {refs} are past their max-ref-age" if refs else ""
            decision = {
                "needed": True,
                "reason": f"{len(expirable)} of {len(snapshots)} snapshots would be expired{dropped}",
            }
        else:
            decision = {
                "needed": False,
                "reason": f"none of {len(snapshots)} snapshots is old enough to expire",
            }
        report["steps"]["expire_snapshots"] = decision
    if "rewrite_manifests" in steps:
        manifests = manifests_decision(
            table, snapshot, max_manifests if max_manifests is not None else MAX_MANIFESTS_DEFAULT
        )
        report["measured"].update(manifests["measured"])
        report["steps"]["rewrite_manifests"] = manifests["rewrite_manifests"]
    return report
