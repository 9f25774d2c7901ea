"""The table-upkeep actions: expire snapshots, rewrite data files, manifests and position deletes,
remove orphan files.

The rewrites can wait for branches still to be published (``wait_for_branches``), and orphan
removal keeps Iceberg's 24-hour safety floor unless the user opts out.
"""

from __future__ import annotations

import argparse
import dataclasses
import re
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import ClassVar

from airflow_iceberg.jobs.spec.action import ActionSpec, non_negative_int, pairs_argv, parse_pair
from airflow_iceberg.jobs.spec.errors import InvalidSpecError
from airflow_iceberg.jobs.spec.identifiers import (
    COLUMN_PATTERN,
    CONTROL_RE,
    quote_column,
    validate_name,
    validate_table_identifier,
)
from airflow_iceberg.jobs.spec.options import validate_options
from airflow_iceberg.jobs.spec.sql_text import validate_expression

#: How ``rewrite_data_files`` groups files: by size only, or sorted as well.
REWRITE_STRATEGIES = ("binpack", "sort")

#: Iceberg's safety floor for removing orphan files: younger files may belong to a running write.
ORPHAN_SAFETY_FLOOR_MS = 24 * 60 * 60 * 1000
_SORT_TERM_RE = re.compile(
    rf"^\s*(?P<column>{COLUMN_PATTERN})(?P<order>(\s+(ASC|DESC))?(\s+NULLS\s+(FIRST|LAST))?)\s*\Z",
    re.IGNORECASE,
)
_ZORDER_RE = re.compile(
    rf"^\s*zorder\s*\(\s*(?P<columns>({COLUMN_PATTERN})(\s*,\s*({COLUMN_PATTERN}))*)\s*\)\s*\Z", re.IGNORECASE
)
_COLUMN_RE = re.compile(COLUMN_PATTERN)
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


def _check_rewrite_options(options: Mapping[str, str]) -> None:
    for key, value in options.items():
        if key.lower() in _REWRITE_INTEGER_OPTIONS and not re.fullmatch(r"[0-9]+", value):
            raise InvalidSpecError(f"rewrite option {key!r} must be a non-negative integer, got {value!r}")
        if key.lower() in _REWRITE_BOOLEAN_OPTIONS and value.lower() not in ("true", "false"):
            raise InvalidSpecError(f"rewrite option {key!r} must be 'true' or 'false', got {value!r}")


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
        non_negative_int(self.older_than, "older_than (epoch milliseconds)")
        non_negative_int(self.retain_last, "retain_last", positive=True)
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
        if self.branch is not None:
            validate_name(self.branch, "branch")
            if self.branch == "main":
                raise InvalidSpecError("branch 'main' is the table itself: leave branch unset for main")
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
        return argv + pairs_argv("--option", self.options) + _wait_argv(self.wait_for_branches)

    @staticmethod
    def add_arguments(parser: argparse.ArgumentParser) -> None:
        ActionSpec.add_arguments(parser)
        parser.add_argument("--branch")
        parser.add_argument("--strategy", default="binpack")
        parser.add_argument("--sort-order")
        parser.add_argument("--where")
        parser.add_argument("--option", type=parse_pair, action="append", default=[])
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

    Columns are written bare or in backticks, like every name (:func:`.identifiers.split_identifier`).
    """
    try:
        zorder = _ZORDER_RE.match(sort_order) if not CONTROL_RE.search(sort_order) else None
        if zorder:
            columns = _COLUMN_RE.findall(zorder.group("columns"))
            return (
                "zorder(" + ", ".join(quote_column(column, "sort_order column") for column in columns) + ")"
            )
        terms = [_SORT_TERM_RE.match(term) for term in _split_terms(sort_order)]
        if terms and all(terms) and not CONTROL_RE.search(sort_order):
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
        return argv + pairs_argv("--option", self.options) + _wait_argv(self.wait_for_branches)

    @staticmethod
    def add_arguments(parser: argparse.ArgumentParser) -> None:
        ActionSpec.add_arguments(parser)
        parser.add_argument("--where")
        parser.add_argument("--option", type=parse_pair, action="append", default=[])
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
class OrphanFilesSpec(ActionSpec):
    """Iceberg's ``remove_orphan_files`` procedure: files under the table no snapshot references.

    A write that was killed before it committed leaves its data files behind; they are never
    read, but they take space until this removes them. By default (``dry_run``) it only lists
    them. ``older_than`` must be at least 24 hours ago (Iceberg's safety floor: a younger file may
    belong to a write still running) unless ``allow_recent_files`` says the user knows better.
    """

    action: ClassVar[str] = "remove-orphan-files"
    older_than: int | None = None  # epoch ms; Iceberg's default is three days ago
    dry_run: bool = True
    allow_recent_files: bool = False

    def validated(self) -> OrphanFilesSpec:
        validate_table_identifier(self.table)
        if self.older_than is not None and (isinstance(self.older_than, bool) or self.older_than < 0):
            raise InvalidSpecError(f"older_than must be epoch milliseconds, got {self.older_than!r}")
        check_orphan_floor(self.older_than, self.allow_recent_files)
        return self

    def to_argv(self) -> list[str]:
        argv = super().to_argv()
        if self.older_than is not None:
            argv += ["--older-than", str(self.older_than)]
        argv += [] if self.dry_run else ["--delete"]
        return argv + (["--allow-recent-files"] if self.allow_recent_files else [])

    @staticmethod
    def add_arguments(parser: argparse.ArgumentParser) -> None:
        ActionSpec.add_arguments(parser)
        parser.add_argument("--older-than", type=int)
        parser.add_argument("--delete", action="store_true")
        parser.add_argument("--allow-recent-files", action="store_true")

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> OrphanFilesSpec:
        return cls(table=args.table, older_than=args.older_than, dry_run=not args.delete,
                   allow_recent_files=args.allow_recent_files)


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
