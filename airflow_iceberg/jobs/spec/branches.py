"""The actions on a table's references: publish a branch (write-audit-publish), tag, roll back."""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from typing import ClassVar

from airflow_iceberg.jobs.spec.action import ActionSpec, non_negative_int, require_one
from airflow_iceberg.jobs.spec.errors import InvalidSpecError
from airflow_iceberg.jobs.spec.identifiers import validate_name, validate_table_identifier


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
        non_negative_int(self.expected_snapshot_id, "expected_snapshot_id")
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
        non_negative_int(self.snapshot_id, "snapshot_id")
        non_negative_int(self.retain_days, "retain_days", positive=True)
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
        require_one(
            {"snapshot_id": self.snapshot_id, "timestamp": self.timestamp}, "rollback", allow_none=False
        )
        non_negative_int(self.snapshot_id, "snapshot_id")
        non_negative_int(self.timestamp, "timestamp (epoch milliseconds)")
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
