"""Specs of the row-level and table-upkeep actions: MERGE, DELETE, branches and tags, upkeep procedures.

Same contract as :mod:`.job_spec` (which parses them): each spec is a frozen dataclass with
``validated()`` (raises :class:`~.job_spec.InvalidSpecError` naming the field, before Spark
starts), ``to_argv()`` and, for the parser, ``add_arguments`` / ``from_args``. Standard library
only: the operators import this while Airflow parses DAGs, and it ships to the driver in the job zip.

Every user text that reaches ``spark.sql`` (merge conditions and assignments, delete conditions,
``where`` filters, sort orders) must be one expression: no statement separator, no comment. The
job also parses each one with Spark's *expression* parser before it builds any SQL
(:func:`airflow_iceberg.jobs.user_sql.check_expression`), so nothing can append a clause or a statement.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import re
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

from airflow_iceberg.jobs import job_spec
from airflow_iceberg.jobs.job_spec import (
    InvalidSpecError,
    Source,
    parse_column,
    quote_column,
    validate_name,
    validate_options,
    validate_table_identifier,
)

#: ``WHEN ...`` kinds of a MERGE clause and the actions each allows.
MERGE_CLAUSE_ACTIONS = {
    "matched": ("update", "delete"),
    "not_matched": ("insert",),
    "not_matched_by_source": ("update", "delete"),
}
_MERGE_CLAUSE_KEYS = frozenset({"when", "then", "condition", "set", "values"})
#: Aliases of the target table and the source rows in merge conditions and assignments.
TARGET_ALIAS, SOURCE_ALIAS = "t", "s"
REWRITE_STRATEGIES = ("binpack", "sort")
#: Iceberg's safety floor for removing orphan files: younger files may belong to a running write.
ORPHAN_SAFETY_FLOOR_MS = 24 * 60 * 60 * 1000
_COLUMN = job_spec._COLUMN
_SORT_TERM_RE = re.compile(
    rf"^\s*(?P<column>{_COLUMN})(?P<order>(\s+(ASC|DESC))?(\s+NULLS\s+(FIRST|LAST))?)\s*\Z", re.IGNORECASE
)
_ZORDER_RE = re.compile(
    rf"^\s*zorder\s*\(\s*(?P<columns>({_COLUMN})(\s*,\s*({_COLUMN}))*)\s*\)\s*\Z", re.IGNORECASE
)
_COLUMN_RE = re.compile(_COLUMN)
#: Rewrite options Iceberg parses as numbers or booleans (checked so a typo fails before Spark).
_REWRITE_INTEGER_OPTIONS = frozenset(
    {
        "target-file-size-bytes",
        "min-file-size-bytes",
        "max-file-size-bytes",
        "min-input-files",
        "max-concurrent-file-group-rewrites",
        "max-file-group-size-bytes",
        "partial-progress.max-commits",
        "delete-file-threshold",
        "output-spec-id",
        "max-files-to-rewrite",
    }
)
_REWRITE_BOOLEAN_OPTIONS = frozenset(
    {
        "partial-progress.enabled",
        "rewrite-all",
        "use-starting-sequence-number",
        "remove-dangling-deletes",
        "rewrite-job-order",
    }
)


def validate_expression(text: object, what: str) -> str:
    """Accept one SQL expression: non-empty, no ``;`` and no comments outside literals."""
    if not isinstance(text, str) or not text.strip():
        raise InvalidSpecError(f"{what} must be a non-empty SQL expression")
    if job_spec._has_statement_separator(text) or job_spec._has_comment(text):
        raise InvalidSpecError(f"{what} {text!r} must be a single expression without ';' or SQL comments")
    return text


def _validate_branch(branch: str | None, what: str = "branch", reset: bool = False) -> None:
    if branch is not None:
        validate_name(branch, what)
        if branch == "main" and what == "branch":
            raise InvalidSpecError("branch 'main' is the table itself: leave branch unset to write to main")
    elif reset:
        raise InvalidSpecError("reset_branch needs branch: it starts that branch afresh from main")


#: A pattern of branch names (``fnmatch``: ``*``, ``?``, ``[...]``) that upkeep waits for.
_BRANCH_PATTERN_RE = re.compile(r"^[A-Za-z0-9_*?\[\]!-]+\Z")


def _validate_branch_patterns(patterns: Sequence[str] | str) -> tuple[str, ...]:
    patterns = (patterns,) if isinstance(patterns, str) else tuple(patterns)
    for pattern in patterns:
        if not isinstance(pattern, str) or not _BRANCH_PATTERN_RE.match(pattern):
            raise InvalidSpecError(
                f"wait_for_branches {pattern!r} is not a branch name pattern: use letters, digits, '_' "
                "and the wildcards '*', '?' and '[...]', e.g. 'audit_*'"
            )
    return patterns


def _wait_argv(patterns: Sequence[str]) -> list[str]:
    return [argument for pattern in patterns for argument in ("--wait-for-branch", pattern)]


def _add_wait_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--wait-for-branch", action="append", default=[])


def _non_negative_int(value: object, what: str, *, positive: bool = False) -> None:
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, int) or value < (1 if positive else 0):
        kind = "a positive" if positive else "a non-negative"
        raise InvalidSpecError(f"{what} must be {kind} integer, got {value!r}")


def _check_rewrite_options(options: Mapping[str, str]) -> None:
    for key, value in options.items():
        if key.lower() in _REWRITE_INTEGER_OPTIONS and not re.fullmatch(r"[0-9]+", value):
            raise InvalidSpecError(f"rewrite option {key!r} must be a non-negative integer, got {value!r}")
        if key.lower() in _REWRITE_BOOLEAN_OPTIONS and value.lower() not in ("true", "false"):
            raise InvalidSpecError(f"rewrite option {key!r} must be 'true' or 'false', got {value!r}")


@dataclass(frozen=True)
class MergeClause:
    """One ``WHEN [NOT] MATCHED [BY SOURCE] [AND condition] THEN ...`` clause.

    ``assignments`` is ``UPDATE SET col = expr, ...`` or ``INSERT (col, ...) VALUES (expr, ...)``;
    empty means ``UPDATE SET *`` / ``INSERT *``.
    """

    when: str
    then: str
    condition: str | None = None
    assignments: dict[str, str] = field(default_factory=dict)

    @classmethod
    def from_mapping(cls, clause: Mapping[str, Any]) -> MergeClause:
        """Build a clause from the operator's dict (``when``, ``then``, ``condition``, ``set``/``values``)."""
        if isinstance(clause, MergeClause):
            return clause
        if not isinstance(clause, Mapping):
            raise InvalidSpecError(
                f"a merge clause must be a dict such as {{'when': 'matched', "
                f"'then': 'update'}}, got {clause!r}"
            )
        unknown = sorted(set(clause) - _MERGE_CLAUSE_KEYS)
        if unknown:
            raise InvalidSpecError(
                f"merge clause keys {', '.join(unknown)} are unknown: use "
                f"{', '.join(sorted(_MERGE_CLAUSE_KEYS))}"
            )
        if "set" in clause and "values" in clause:
            raise InvalidSpecError("a merge clause takes 'set' (update) or 'values' (insert), not both")
        assignments = clause.get("set", clause.get("values")) or {}
        if not isinstance(assignments, Mapping):
            raise InvalidSpecError(
                f"merge clause 'set'/'values' must map columns to expressions, got {assignments!r}"
            )
        return cls(
            when=str(clause.get("when")),
            then=str(clause.get("then")),
            condition=clause.get("condition"),
            assignments={str(k): v for k, v in assignments.items()},
        )

    def validated(self) -> MergeClause:
        allowed = MERGE_CLAUSE_ACTIONS.get(self.when)
        if allowed is None:
            raise InvalidSpecError(
                f"merge clause 'when' must be one of {', '.join(MERGE_CLAUSE_ACTIONS)}, got {self.when!r}"
            )
        if self.then not in allowed:
            raise InvalidSpecError(
                f"merge clause when={self.when!r} allows then={' or '.join(allowed)}, got {self.then!r}"
            )
        if self.condition is not None:
            validate_expression(self.condition, f"merge clause ({self.when}) condition")
        if self.then == "delete" and self.assignments:
            raise InvalidSpecError(f"merge clause when={self.when!r} then='delete' takes no 'set'")
        if self.when == "not_matched_by_source" and self.then == "update" and not self.assignments:
            raise InvalidSpecError(
                "when='not_matched_by_source' then='update' needs 'set': there is no "
                "source row to copy with UPDATE SET *"
            )
        for column, expression in self.assignments.items():
            parse_column(column, "merge clause column")
            validate_expression(expression, f"merge clause value of {column!r}")
        return dataclasses.replace(self, assignments={k: str(v) for k, v in self.assignments.items()})

    def to_json(self) -> str:
        return json.dumps(
            {
                "when": self.when,
                "then": self.then,
                "condition": self.condition,
                "assignments": self.assignments,
            },
            sort_keys=True,
        )

    @classmethod
    def from_json(cls, text: str) -> MergeClause:
        data = json.loads(text)
        return cls(
            when=data["when"],
            then=data["then"],
            condition=data.get("condition"),
            assignments=dict(data.get("assignments") or {}),
        )

    def sql(self) -> str:
        """The clause as Spark SQL (after validation and the job's expression parse)."""
        head = {
            "matched": "WHEN MATCHED",
            "not_matched": "WHEN NOT MATCHED",
            "not_matched_by_source": "WHEN NOT MATCHED BY SOURCE",
        }[self.when]
        if self.condition is not None:
            head += f" AND ({self.condition})"
        if self.then == "delete":
            return f"{head} THEN DELETE"
        if self.then == "update":
            if not self.assignments:
                return f"{head} THEN UPDATE SET *"
            return f"{head} THEN UPDATE SET " + ", ".join(
                f"{TARGET_ALIAS}.{quote_column(column)} = {expression}"
                for column, expression in self.assignments.items()
            )
        if not self.assignments:
            return f"{head} THEN INSERT *"
        return (
            f"{head} THEN INSERT ({', '.join(quote_column(column) for column in self.assignments)}) "
            f"VALUES ({', '.join(self.assignments.values())})"
        )


#: ``WHEN MATCHED THEN UPDATE SET * WHEN NOT MATCHED THEN INSERT *``: the upsert a merge does by default.
UPSERT_CLAUSES = (MergeClause("matched", "update"), MergeClause("not_matched", "insert"))


@dataclass(frozen=True)
class ActionSpec:
    """What every action spec shares: the table, and the argparse plumbing."""

    action: ClassVar[str]
    table: str

    def validated(self) -> Any:
        validate_table_identifier(self.table)
        return self

    def to_argv(self) -> list[str]:
        return [self.action, "--table", self.table]

    @staticmethod
    def add_arguments(parser: argparse.ArgumentParser) -> None:
        parser.add_argument("--table", required=True)

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> Any:
        return cls(table=args.table)


@dataclass(frozen=True)
class MergeSpec(ActionSpec):
    """``MERGE INTO table [branch] USING source ON ... WHEN ...``: upserts, CDC, slowly changing dimensions.

    Match on ``keys`` (``t.k = s.k AND ...``) or on an ``on`` condition over the aliases ``t``
    (the table) and ``s`` (the source). Without clauses, the merge is an upsert.
    """

    action: ClassVar[str] = "merge"
    source: Source = field(default_factory=Source)
    keys: tuple[str, ...] = ()
    on: str | None = None
    clauses: tuple[MergeClause, ...] = ()
    branch: str | None = None
    #: Point ``branch`` at ``main``'s current snapshot before merging, dropping what it held.
    reset_branch: bool = False

    def validated(self) -> MergeSpec:
        validate_table_identifier(self.table)
        if bool(self.keys) == (self.on is not None):
            raise InvalidSpecError("merge: give exactly one of keys (key columns) or on (a match condition)")
        for key in self.keys:
            parse_column(key, "merge key column")
        if self.on is not None:
            validate_expression(self.on, "merge condition 'on'")
        clauses = tuple(MergeClause.from_mapping(c).validated() for c in self.clauses) or UPSERT_CLAUSES
        _check_clause_order(clauses)
        _validate_branch(self.branch, reset=self.reset_branch)
        return dataclasses.replace(
            self, source=self.source.validated(), keys=tuple(self.keys), clauses=clauses
        )

    @property
    def match_condition(self) -> str:
        if self.on is not None:
            return self.on
        quoted = [quote_column(key) for key in self.keys]
        return " AND ".join(f"{TARGET_ALIAS}.{key} = {SOURCE_ALIAS}.{key}" for key in quoted)

    def to_argv(self) -> list[str]:
        argv = [*super().to_argv(), *job_spec._source_argv(self.source)]
        for key in self.keys:
            argv += ["--key", key]
        if self.on is not None:
            argv += ["--on", self.on]
        for clause in self.clauses:
            argv += ["--clause", clause.to_json()]
        return argv + _branch_argv(self.branch, self.reset_branch)

    @staticmethod
    def add_arguments(parser: argparse.ArgumentParser) -> None:
        ActionSpec.add_arguments(parser)
        for flag in (
            "--source-query",
            "--source-table",
            "--source-path",
            "--source-format",
            "--source-schema",
            "--on",
            "--branch",
        ):
            parser.add_argument(flag)
        parser.add_argument("--source-option", type=job_spec._pair, action="append", default=[])
        parser.add_argument("--key", action="append", default=[])
        parser.add_argument("--clause", action="append", default=[])
        parser.add_argument("--reset-branch", action="store_true")

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> MergeSpec:
        return cls(
            table=args.table,
            source=Source(
                query=args.source_query,
                table=args.source_table,
                path=args.source_path,
                format=args.source_format,
                options=dict(args.source_option),
                schema=args.source_schema,
            ),
            keys=tuple(args.key),
            on=args.on,
            clauses=tuple(MergeClause.from_json(c) for c in args.clause),
            branch=args.branch,
            reset_branch=args.reset_branch,
        )


def _branch_argv(branch: str | None, reset: bool) -> list[str]:
    return (["--branch", branch] if branch else []) + (["--reset-branch"] if reset else [])


def _check_clause_order(clauses: Sequence[MergeClause]) -> None:
    """Spark's rule, checked before Spark starts: of several clauses of one kind, only the last may omit
    its condition."""
    for when in MERGE_CLAUSE_ACTIONS:
        of_kind = [clause for clause in clauses if clause.when == when]
        if any(clause.condition is None for clause in of_kind[:-1]):
            raise InvalidSpecError(
                f"merge clauses when={when!r}: only the last one may omit its condition (it would shadow "
                "the ones after it)"
            )


@dataclass(frozen=True)
class DeleteSpec(ActionSpec):
    """``DELETE FROM table [branch] WHERE condition``: GDPR deletes, retention by age."""

    action: ClassVar[str] = "delete"
    condition: str = ""
    branch: str | None = None
    #: Point ``branch`` at ``main``'s current snapshot before deleting, dropping what it held.
    reset_branch: bool = False

    def validated(self) -> DeleteSpec:
        validate_table_identifier(self.table)
        validate_expression(self.condition, "delete condition")
        _validate_branch(self.branch, reset=self.reset_branch)
        return self

    def to_argv(self) -> list[str]:
        argv = [*super().to_argv(), "--condition", self.condition]
        return argv + _branch_argv(self.branch, self.reset_branch)

    @staticmethod
    def add_arguments(parser: argparse.ArgumentParser) -> None:
        ActionSpec.add_arguments(parser)
        parser.add_argument("--condition", required=True)
        parser.add_argument("--branch")
        parser.add_argument("--reset-branch", action="store_true")

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> DeleteSpec:
        return cls(
            table=args.table, condition=args.condition, branch=args.branch, reset_branch=args.reset_branch
        )


@dataclass(frozen=True)
class PublishSpec(ActionSpec):
    """Fast-forward ``target_branch`` (``main``) to the audited snapshot of ``branch``, then maybe drop it.

    ``expected_snapshot_id`` pins what was audited: the branch must still be at it, and only it is
    published. A missing ``target_branch`` is refused unless ``create_target_branch``.
    """

    action: ClassVar[str] = "publish"
    branch: str = ""
    target_branch: str = "main"
    drop_branch: bool = False
    expected_snapshot_id: int | None = None
    create_target_branch: bool = False

    def validated(self) -> PublishSpec:
        validate_table_identifier(self.table)
        validate_name(self.branch, "branch")
        validate_name(self.target_branch, "target_branch")
        if self.branch == self.target_branch:
            raise InvalidSpecError(f"branch and target_branch are both {self.branch!r}: nothing to publish")
        if self.drop_branch and self.branch == "main":
            raise InvalidSpecError("drop_branch cannot drop 'main'")
        _non_negative_int(self.expected_snapshot_id, "expected_snapshot_id")
        return self

    def to_argv(self) -> list[str]:
        argv = [*super().to_argv(), "--branch", self.branch, "--target-branch", self.target_branch]
        if self.expected_snapshot_id is not None:
            argv += ["--expected-snapshot-id", str(self.expected_snapshot_id)]
        argv += ["--create-target-branch"] if self.create_target_branch else []
        return argv + (["--drop-branch"] if self.drop_branch else [])

    @staticmethod
    def add_arguments(parser: argparse.ArgumentParser) -> None:
        ActionSpec.add_arguments(parser)
        parser.add_argument("--branch", required=True)
        parser.add_argument("--target-branch", default="main")
        parser.add_argument("--drop-branch", action="store_true")
        parser.add_argument("--expected-snapshot-id", type=int)
        parser.add_argument("--create-target-branch", action="store_true")

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> PublishSpec:
        return cls(
            table=args.table,
            branch=args.branch,
            target_branch=args.target_branch,
            drop_branch=args.drop_branch,
            expected_snapshot_id=args.expected_snapshot_id,
            create_target_branch=args.create_target_branch,
        )


@dataclass(frozen=True)
class TagSpec(ActionSpec):
    """Create (or replace) a tag on a snapshot, by default ``main``'s current one, with optional retention.

    Without ``snapshot_id``, the snapshot is the one the task's first try resolved (a retry never
    moves the tag to a later snapshot of ``main``).
    """

    action: ClassVar[str] = "tag"
    tag: str = ""
    snapshot_id: int | None = None
    retain_days: int | None = None
    replace: bool = True

    def validated(self) -> TagSpec:
        validate_table_identifier(self.table)
        validate_name(self.tag, "tag")
        _non_negative_int(self.snapshot_id, "snapshot_id")
        _non_negative_int(self.retain_days, "retain_days", positive=True)
        return self

    def to_argv(self) -> list[str]:
        argv = [*super().to_argv(), "--tag", self.tag]
        if self.snapshot_id is not None:
            argv += ["--snapshot-id", str(self.snapshot_id)]
        if self.retain_days is not None:
            argv += ["--retain-days", str(self.retain_days)]
        return argv + ([] if self.replace else ["--no-replace"])

    @staticmethod
    def add_arguments(parser: argparse.ArgumentParser) -> None:
        ActionSpec.add_arguments(parser)
        parser.add_argument("--tag", required=True)
        parser.add_argument("--snapshot-id", type=int)
        parser.add_argument("--retain-days", type=int)
        parser.add_argument("--no-replace", action="store_true")

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> TagSpec:
        return cls(
            table=args.table,
            tag=args.tag,
            snapshot_id=args.snapshot_id,
            retain_days=args.retain_days,
            replace=not args.no_replace,
        )


@dataclass(frozen=True)
class ExpireSnapshotsSpec(ActionSpec):
    """``expire_snapshots``: drop snapshots older than ``older_than``, keeping the last ``retain_last``.

    Snapshots a branch or tag references are always kept (Iceberg's rule).
    """

    action: ClassVar[str] = "expire-snapshots"
    older_than: int | None = None  # epoch ms; Iceberg's default is five days ago
    retain_last: int | None = None

    def validated(self) -> ExpireSnapshotsSpec:
        validate_table_identifier(self.table)
        _non_negative_int(self.older_than, "older_than (epoch milliseconds)")
        _non_negative_int(self.retain_last, "retain_last", positive=True)
        return self

    def to_argv(self) -> list[str]:
        argv = super().to_argv()
        if self.older_than is not None:
            argv += ["--older-than", str(self.older_than)]
        if self.retain_last is not None:
            argv += ["--retain-last", str(self.retain_last)]
        return argv

    @staticmethod
    def add_arguments(parser: argparse.ArgumentParser) -> None:
        ActionSpec.add_arguments(parser)
        parser.add_argument("--older-than", type=int)
        parser.add_argument("--retain-last", type=int)

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> ExpireSnapshotsSpec:
        return cls(table=args.table, older_than=args.older_than, retain_last=args.retain_last)


@dataclass(frozen=True)
class RewriteDataFilesSpec(ActionSpec):
    """``rewrite_data_files``: compact small files (``binpack``) or also sort them (``sort``)."""

    action: ClassVar[str] = "rewrite-data-files"
    strategy: str = "binpack"
    sort_order: str | None = None
    where: str | None = None
    options: dict[str, str] = field(default_factory=dict)
    #: Do nothing while a branch matching one of these patterns waits to be published.
    wait_for_branches: tuple[str, ...] = ()
    #: Compact this branch (an audit branch before its audit) instead of ``main``: Iceberg 1.11+.
    branch: str | None = None

    def validated(self) -> RewriteDataFilesSpec:
        validate_table_identifier(self.table)
        patterns = _validate_branch_patterns(self.wait_for_branches)
        _validate_branch(self.branch)
        if self.branch is not None and patterns:
            raise InvalidSpecError(
                f"wait_for_branches keeps a compaction of main from breaking a pending publish; a "
                f"compaction of branch {self.branch!r} leaves main alone: give branch or wait_for_branches"
            )
        if self.strategy not in REWRITE_STRATEGIES:
            raise InvalidSpecError(
                f"strategy must be one of {', '.join(REWRITE_STRATEGIES)}, got {self.strategy!r}"
            )
        if self.sort_order is not None:
            if self.strategy != "sort":
                raise InvalidSpecError("sort_order applies only to strategy 'sort'")
            _validate_sort_order(self.sort_order)
        if self.where is not None:
            validate_expression(self.where, "where")
        options = validate_options(self.options, "rewrite option")
        _check_rewrite_options(options)
        return dataclasses.replace(self, options=options, wait_for_branches=patterns)

    def to_argv(self) -> list[str]:
        argv = [*super().to_argv(), "--strategy", self.strategy]
        for flag, value in (("--sort-order", self.sort_order), ("--where", self.where)):
            if value is not None:
                argv += [flag, value]
        argv += ["--branch", self.branch] if self.branch is not None else []
        return argv + job_spec._pairs_argv("--option", self.options) + _wait_argv(self.wait_for_branches)

    @staticmethod
    def add_arguments(parser: argparse.ArgumentParser) -> None:
        ActionSpec.add_arguments(parser)
        parser.add_argument("--branch")
        parser.add_argument("--strategy", default="binpack")
        parser.add_argument("--sort-order")
        parser.add_argument("--where")
        parser.add_argument("--option", type=job_spec._pair, action="append", default=[])
        _add_wait_argument(parser)

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> RewriteDataFilesSpec:
        return cls(
            table=args.table,
            strategy=args.strategy,
            sort_order=args.sort_order,
            where=args.where,
            options=dict(args.option),
            wait_for_branches=tuple(args.wait_for_branch),
            branch=args.branch,
        )


def _validate_sort_order(sort_order: str) -> None:
    quoted_sort_order(sort_order)


def quoted_sort_order(sort_order: str) -> str:
    """The sort order with every column in backticks, as Iceberg's sort-order parser reads it.

    Columns are written bare or in backticks, like every name (:func:`~.job_spec.split_identifier`).
    """
    try:
        zorder = _ZORDER_RE.match(sort_order) if not job_spec._CONTROL_RE.search(sort_order) else None
        if zorder:
            columns = _COLUMN_RE.findall(zorder.group("columns"))
            return (
                "zorder(" + ", ".join(quote_column(column, "sort_order column") for column in columns) + ")"
            )
        terms = [_SORT_TERM_RE.match(term) for term in _split_terms(sort_order)]
        if terms and all(terms) and not job_spec._CONTROL_RE.search(sort_order):
            return ", ".join(_quoted_sort_term(term) for term in terms if term)
    except InvalidSpecError as error:
        raise InvalidSpecError(f"sort_order {sort_order!r}: {error}") from None
    raise InvalidSpecError(
        f"sort_order {sort_order!r} must be 'col [ASC|DESC] [NULLS FIRST|LAST], ...' or 'zorder(c1, c2)' "
        "(a column name holding spaces, dots, quotes, commas or brackets goes in backticks)"
    )


def _quoted_sort_term(term: re.Match[str]) -> str:
    order = " ".join(term.group("order").split())
    return quote_column(term.group("column"), "sort_order column") + (f" {order}" if order else "")


def _split_terms(sort_order: str) -> list[str]:
    """Split on the commas outside backticks (a doubled backtick toggles twice, so it stays inside)."""
    terms, current, quoted = [], [], False
    for char in sort_order:
        if char == "`":
            quoted = not quoted
        if char == "," and not quoted:
            terms.append("".join(current))
            current = []
        else:
            current.append(char)
    return [*terms, "".join(current)]


@dataclass(frozen=True)
class RewriteManifestsSpec(ActionSpec):
    """``rewrite_manifests``: regroup manifests so that scan planning reads fewer of them."""

    action: ClassVar[str] = "rewrite-manifests"
    #: Do nothing while a branch matching one of these patterns waits to be published.
    wait_for_branches: tuple[str, ...] = ()

    def validated(self) -> RewriteManifestsSpec:
        validate_table_identifier(self.table)
        return dataclasses.replace(self, wait_for_branches=_validate_branch_patterns(self.wait_for_branches))

    def to_argv(self) -> list[str]:
        return super().to_argv() + _wait_argv(self.wait_for_branches)

    @staticmethod
    def add_arguments(parser: argparse.ArgumentParser) -> None:
        ActionSpec.add_arguments(parser)
        _add_wait_argument(parser)

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> RewriteManifestsSpec:
        return cls(table=args.table, wait_for_branches=tuple(args.wait_for_branch))


@dataclass(frozen=True)
class RewritePositionDeletesSpec(ActionSpec):
    """``rewrite_position_delete_files``: compact the delete files merge-on-read leaves behind."""

    action: ClassVar[str] = "rewrite-position-deletes"
    where: str | None = None
    options: dict[str, str] = field(default_factory=dict)
    #: Do nothing while a branch matching one of these patterns waits to be published.
    wait_for_branches: tuple[str, ...] = ()

    def validated(self) -> RewritePositionDeletesSpec:
        validate_table_identifier(self.table)
        if self.where is not None:
            validate_expression(self.where, "where")
        options = validate_options(self.options, "rewrite option")
        _check_rewrite_options(options)
        patterns = _validate_branch_patterns(self.wait_for_branches)
        return dataclasses.replace(self, options=options, wait_for_branches=patterns)

    def to_argv(self) -> list[str]:
        argv = super().to_argv() + (["--where", self.where] if self.where is not None else [])
        return argv + job_spec._pairs_argv("--option", self.options) + _wait_argv(self.wait_for_branches)

    @staticmethod
    def add_arguments(parser: argparse.ArgumentParser) -> None:
        ActionSpec.add_arguments(parser)
        parser.add_argument("--where")
        parser.add_argument("--option", type=job_spec._pair, action="append", default=[])
        _add_wait_argument(parser)

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> RewritePositionDeletesSpec:
        return cls(
            table=args.table,
            where=args.where,
            options=dict(args.option),
            wait_for_branches=tuple(args.wait_for_branch),
        )


@dataclass(frozen=True)
class RollbackSpec(ActionSpec):
    """Make a snapshot of ``main``'s history current: ``snapshot_id``, or the last before ``timestamp``.

    A timestamp is resolved among the ancestors of ``main`` as the first try saw it, so every try
    rolls back to the same snapshot (``rollback_to_snapshot``).
    """

    action: ClassVar[str] = "rollback"
    snapshot_id: int | None = None
    timestamp: int | None = None  # epoch ms

    def validated(self) -> RollbackSpec:
        validate_table_identifier(self.table)
        job_spec._require_one(
            {"snapshot_id": self.snapshot_id, "timestamp": self.timestamp}, "rollback", allow_none=False
        )
        _non_negative_int(self.snapshot_id, "snapshot_id")
        _non_negative_int(self.timestamp, "timestamp (epoch milliseconds)")
        return self

    def to_argv(self) -> list[str]:
        if self.snapshot_id is not None:
            return [*super().to_argv(), "--snapshot-id", str(self.snapshot_id)]
        return [*super().to_argv(), "--timestamp", str(self.timestamp)]

    @staticmethod
    def add_arguments(parser: argparse.ArgumentParser) -> None:
        ActionSpec.add_arguments(parser)
        parser.add_argument("--snapshot-id", type=int)
        parser.add_argument("--timestamp", type=int)

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> RollbackSpec:
        return cls(table=args.table, snapshot_id=args.snapshot_id, timestamp=args.timestamp)


#: Every action spec, by its argv action name (the parser's subcommands).
ACTION_SPECS: dict[str, type[ActionSpec]] = {
    spec.action: spec
    for spec in (
        MergeSpec,
        DeleteSpec,
        PublishSpec,
        TagSpec,
        ExpireSnapshotsSpec,
        RewriteDataFilesSpec,
        RewriteManifestsSpec,
        RewritePositionDeletesSpec,
        RollbackSpec,
    )
}


def check_orphan_floor(older_than: int | None, allow_recent_files: bool, now_ms: int | None = None) -> None:
    """Refuse an ``older_than`` within the last 24 hours unless the user opted in explicitly.

    A file younger than that may belong to a write that has not committed yet; deleting it breaks
    that write. Iceberg's own procedure has the same floor.
    """
    if older_than is None or allow_recent_files:
        return
    now = int(time.time() * 1000) if now_ms is None else now_ms
    if older_than > now - ORPHAN_SAFETY_FLOOR_MS:
        raise InvalidSpecError(
            f"older_than {older_than} is less than 24 hours ago: files that young may belong to a write "
            "still running. Use an older cutoff, or set allow_recent_files=True when you know no write "
            "to the table can be running"
        )
