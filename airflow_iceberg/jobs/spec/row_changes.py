"""The row-level actions: MERGE INTO and DELETE FROM, on ``main`` or on a branch.

Every user text these put into ``spark.sql`` (match conditions, clause conditions and
assignments, delete conditions) must be one expression (:func:`.sql_text.validate_expression`);
the job also parses each with Spark's expression parser before it builds any SQL.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

from airflow_iceberg.jobs.spec.action import ActionSpec
from airflow_iceberg.jobs.spec.errors import InvalidSpecError
from airflow_iceberg.jobs.spec.identifiers import (
    parse_column,
    quote_column,
    validate_name,
    validate_table_identifier,
)
from airflow_iceberg.jobs.spec.sources import Source
from airflow_iceberg.jobs.spec.sql_text import validate_expression

#: ``WHEN ...`` kinds of a MERGE clause and the actions each allows.
MERGE_CLAUSE_ACTIONS = {
    "matched": ("update", "delete"),
    "not_matched": ("insert",),
    "not_matched_by_source": ("update", "delete"),
}
_MERGE_CLAUSE_KEYS = frozenset({"when", "then", "condition", "set", "values"})
#: Aliases of the target table and the source rows in merge conditions and assignments.
TARGET_ALIAS, SOURCE_ALIAS = "t", "s"


def _validate_branch(branch: str | None, what: str = "branch", reset: bool = False) -> None:
    if branch is not None:
        validate_name(branch, what)
        if branch == "main" and what == "branch":
            raise InvalidSpecError("branch 'main' is the table itself: leave branch unset to write to main")
    elif reset:
        raise InvalidSpecError("reset_branch needs branch: it starts that branch afresh from main")


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
        argv = [*super().to_argv(), *self.source.to_argv()]
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
        Source.add_arguments(parser)
        parser.add_argument("--on")
        parser.add_argument("--branch")
        parser.add_argument("--key", action="append", default=[])
        parser.add_argument("--clause", action="append", default=[])
        parser.add_argument("--reset-branch", action="store_true")

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> MergeSpec:
        return cls(
            table=args.table,
            source=Source.from_args(args),
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
