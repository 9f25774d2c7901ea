"""The read action: which snapshot or range of an Iceberg table is read, and where its rows go."""

from __future__ import annotations

import argparse
import dataclasses
from dataclasses import dataclass, field
from typing import ClassVar

from airflow_iceberg.jobs.spec.action import ActionSpec, pairs_argv, parse_pair, require_one
from airflow_iceberg.jobs.spec.errors import InvalidSpecError
from airflow_iceberg.jobs.spec.identifiers import parse_column, validate_name, validate_table_identifier
from airflow_iceberg.jobs.spec.options import (
    check_iceberg_option_values,
    reject_reserved_options,
    validate_options,
)
from airflow_iceberg.jobs.spec.sources import FILE_FORMATS
from airflow_iceberg.jobs.spec.sql_text import validate_condition

#: How a read writes its sink table (the write modes that take no condition).
SINK_MODES = ("create", "replace", "create_or_replace", "append", "overwrite_partitions")
#: Spark's save modes, for a read whose sink is files.
PATH_SINK_MODES = ("error", "overwrite", "append", "ignore")

#: Read options that choose *which* data is read. They are ReadSpec fields, never ``read_options``,
#: so that the "at most one selector" rule cannot be bypassed (Spark option keys are case-insensitive).
SELECTOR_READ_OPTIONS = {
    "snapshot-id": "snapshot_id",
    "as-of-timestamp": "as_of_timestamp",
    "branch": "branch",
    "tag": "tag",
    "start-snapshot-id": "start_snapshot_id",
    "end-snapshot-id": "end_snapshot_id",
    "stream-from-timestamp": "stream_from_timestamp",
    "versionasof": "snapshot_id",
    "timestampasof": "as_of_timestamp",
    "start-timestamp": "start_snapshot_id",
    "end-timestamp": "end_snapshot_id",
}


@dataclass(frozen=True)
class ReadSpec(ActionSpec):
    """One read of an Iceberg table plus where its rows go.

    What is read is chosen by at most one selector: a time-travel selector (``snapshot_id``,
    ``as_of_timestamp``, ``branch``, ``tag``), an incremental range (``start_snapshot_id``,
    optionally ``end_snapshot_id``: the rows appended after the start, up to and including the
    end), or ``stream_from_timestamp`` (a bounded Structured Streaming read that resumes from
    ``checkpoint_location`` on every run). With none, the current snapshot is read.
    """

    action: ClassVar[str] = "read"
    snapshot_id: int | None = None
    as_of_timestamp: int | None = None
    branch: str | None = None
    tag: str | None = None
    read_options: dict[str, str] = field(default_factory=dict)
    columns: tuple[str, ...] = ()
    filter: str | None = None
    sink_table: str | None = None
    sink_mode: str = "create_or_replace"
    sink_path: str | None = None
    sink_format: str = "parquet"
    sink_path_mode: str = "error"
    preview_rows: int = 0
    start_snapshot_id: int | None = None
    end_snapshot_id: int | None = None
    stream_from_timestamp: int | None = None
    checkpoint_location: str | None = None

    @property
    def selector(self) -> str | None:
        """Which selector is set, if any; raises when more than one is."""
        return require_one(
            {"snapshot_id": self.snapshot_id, "as_of_timestamp": self.as_of_timestamp,
             "branch": self.branch, "tag": self.tag, "start_snapshot_id": self.start_snapshot_id,
             "stream_from_timestamp": self.stream_from_timestamp},
            "time travel", allow_none=True,
        )

    @property
    def is_stream(self) -> bool:
        return self.stream_from_timestamp is not None

    def validated(self) -> ReadSpec:
        """Return a copy with normalised options, or raise :class:`InvalidSpecError` naming the field."""
        validate_table_identifier(self.table)
        self._check_selectors()
        for column in self.columns:
            parse_column(column, "column")
        if self.filter is not None:
            validate_condition(self.filter, "filter")
        self._check_sink()
        if self.is_stream:
            self._check_stream()
        elif self.checkpoint_location is not None:
            raise InvalidSpecError("checkpoint_location applies only to a stream (stream_from_timestamp)")
        read_options = validate_options(self.read_options, "read option")
        reject_reserved_options(read_options, SELECTOR_READ_OPTIONS, "read option")
        check_iceberg_option_values(read_options, "read option")
        return dataclasses.replace(self, columns=tuple(self.columns), read_options=read_options)

    def _check_selectors(self) -> None:
        self.selector  # noqa: B018 - raises when two selectors are given
        for name in ("snapshot_id", "as_of_timestamp", "start_snapshot_id", "end_snapshot_id",
                     "stream_from_timestamp"):
            value = getattr(self, name)
            if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 0):
                raise InvalidSpecError(f"{name} must be a non-negative integer, got {value!r}")
        for name in ("branch", "tag"):
            if getattr(self, name) is not None:
                validate_name(getattr(self, name), name)
        if self.end_snapshot_id is not None and self.start_snapshot_id is None:
            raise InvalidSpecError("end_snapshot_id needs start_snapshot_id: an incremental read is a range")

    def _check_sink(self) -> None:
        require_one({"sink_table": self.sink_table, "sink_path": self.sink_path}, "sink", allow_none=True)
        if self.sink_table is not None:
            validate_table_identifier(self.sink_table, "sink table")
        if self.sink_mode not in SINK_MODES:
            raise InvalidSpecError(
                f"sink_mode must be one of {', '.join(SINK_MODES)}, got {self.sink_mode!r}"
            )
        if self.sink_format not in FILE_FORMATS:
            raise InvalidSpecError(
                f"sink_format must be one of {', '.join(FILE_FORMATS)}, got {self.sink_format!r}"
            )
        if self.sink_path_mode not in PATH_SINK_MODES:
            raise InvalidSpecError(
                f"sink_path_mode must be one of {', '.join(PATH_SINK_MODES)}, got {self.sink_path_mode!r}"
            )
        rows = self.preview_rows
        if isinstance(rows, bool) or not isinstance(rows, int) or not 0 <= rows <= 1000:
            raise InvalidSpecError(f"preview_rows must be an integer from 0 to 1000, got {rows!r}")

    def _check_stream(self) -> None:
        """A stream only appends, and only its checkpoint says where the previous run stopped."""
        if not self.checkpoint_location or not isinstance(self.checkpoint_location, str):
            raise InvalidSpecError("a stream (stream_from_timestamp) needs a checkpoint_location")
        if not (self.sink_table or self.sink_path):
            raise InvalidSpecError("a stream (stream_from_timestamp) needs a sink: sink_table or sink_path")
        if self.sink_table and self.sink_mode != "append":
            raise InvalidSpecError(
                f"a stream appends to its sink table: set sink_mode='append', not {self.sink_mode!r}"
            )
        if self.sink_path and self.sink_path_mode != "append":
            raise InvalidSpecError(
                "a stream appends to its sink files: set sink_path_mode='append', "
                f"not {self.sink_path_mode!r}"
            )
        if self.preview_rows:
            raise InvalidSpecError("preview_rows is not available for a stream (stream_from_timestamp)")

    def to_argv(self) -> list[str]:
        argv = super().to_argv()
        for flag, value in (("--snapshot-id", self.snapshot_id), ("--as-of-timestamp", self.as_of_timestamp),
                            ("--branch", self.branch), ("--tag", self.tag),
                            ("--start-snapshot-id", self.start_snapshot_id),
                            ("--end-snapshot-id", self.end_snapshot_id),
                            ("--stream-from-timestamp", self.stream_from_timestamp),
                            ("--checkpoint-location", self.checkpoint_location), ("--filter", self.filter)):
            if value is not None:
                argv += [flag, str(value)]
        argv += pairs_argv("--read-option", self.read_options)
        for column in self.columns:
            argv += ["--column", column]  # one flag each: a quoted name may hold a comma
        if self.sink_table:
            argv += ["--sink-table", self.sink_table, "--sink-mode", self.sink_mode]
        if self.sink_path:
            argv += ["--sink-path", self.sink_path, "--sink-format", self.sink_format,
                     "--sink-path-mode", self.sink_path_mode]
        if self.preview_rows:
            argv += ["--preview-rows", str(self.preview_rows)]
        return argv

    @staticmethod
    def add_arguments(parser: argparse.ArgumentParser) -> None:
        ActionSpec.add_arguments(parser)
        for flag in ("--snapshot-id", "--as-of-timestamp"):
            parser.add_argument(flag, type=int)
        parser.add_argument("--branch")
        parser.add_argument("--tag")
        for flag in ("--start-snapshot-id", "--end-snapshot-id", "--stream-from-timestamp"):
            parser.add_argument(flag, type=int)
        parser.add_argument("--checkpoint-location")
        parser.add_argument("--read-option", type=parse_pair, action="append", default=[])
        parser.add_argument("--column", action="append", default=[])
        parser.add_argument("--filter")
        parser.add_argument("--sink-table")
        parser.add_argument("--sink-mode", default="create_or_replace")
        parser.add_argument("--sink-path")
        parser.add_argument("--sink-format", default="parquet")
        parser.add_argument("--sink-path-mode", default="error")
        parser.add_argument("--preview-rows", type=int, default=0)

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> ReadSpec:
        return cls(
            table=args.table,
            snapshot_id=args.snapshot_id,
            as_of_timestamp=args.as_of_timestamp,
            branch=args.branch,
            tag=args.tag,
            read_options=dict(args.read_option),
            columns=tuple(args.column),
            filter=args.filter,
            sink_table=args.sink_table,
            sink_mode=args.sink_mode,
            sink_path=args.sink_path,
            sink_format=args.sink_format,
            sink_path_mode=args.sink_path_mode,
            preview_rows=args.preview_rows,
            start_snapshot_id=args.start_snapshot_id,
            end_snapshot_id=args.end_snapshot_id,
            stream_from_timestamp=args.stream_from_timestamp,
            checkpoint_location=args.checkpoint_location,
        )
