"""What every action spec shares: the table, validation, and writing and reading its own argv.

One pattern for every action: a spec is a frozen dataclass that names its ``action`` (the job's
subcommand), checks itself in ``validated()`` (raising :class:`InvalidSpecError` naming the
field, before Spark starts and again in the job), writes its argv with ``to_argv()``, and
declares the same flags for the job's parser with ``add_arguments`` and reads them back with
``from_args``. :mod:`.registry` builds the job's parser from every spec.
"""

from __future__ import annotations

import argparse
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

from airflow_iceberg.jobs.spec.errors import InvalidSpecError
from airflow_iceberg.jobs.spec.identifiers import validate_table_identifier


@dataclass(frozen=True)
class ActionSpec:
    """What every action spec shares: the table it acts on, and the four methods of the contract.

    A subclass sets ``action`` and adds its fields; each method extends this one's.
    """

    #: The job's subcommand for this action (``write``, ``merge``, ``expire-snapshots``, ...).
    action: ClassVar[str]
    table: str

    def validated(self) -> Any:
        """The spec, normalised (options as ``str -> str``, lists as tuples), or
        :class:`InvalidSpecError` naming the field. The operator and the job both call it."""
        validate_table_identifier(self.table)
        return self

    def to_argv(self) -> list[str]:
        """The job's application arguments for this spec: the subcommand, then its flags."""
        return [self.action, "--table", self.table]

    @staticmethod
    def add_arguments(parser: argparse.ArgumentParser) -> None:
        """Declare on the subcommand's parser the flags :meth:`to_argv` writes."""
        parser.add_argument("--table", required=True)

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> Any:
        """The spec back from the parsed flags, not yet validated (:func:`.request.parse_argv` does)."""
        return cls(table=args.table)


def pairs_argv(flag: str, pairs: Mapping[str, str]) -> list[str]:
    """``flag KEY=VALUE`` once per pair: how a map (options, properties) travels in argv."""
    argv: list[str] = []
    for key, value in pairs.items():
        argv += [flag, f"{key}={value}"]
    return argv


def parse_pair(text: str) -> tuple[str, str]:
    """The argparse ``type`` that reads one :func:`pairs_argv` value back (split at the first ``=``)."""
    key, sep, value = text.partition("=")
    if not sep:
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got {text!r}")
    return key, value


def require_one(values: Mapping[str, object], what: str, *, allow_none: bool) -> str | None:
    """The name of the one field of ``values`` that is set; raises when more (or, unless
    ``allow_none``, fewer) are."""
    chosen = [name for name, value in values.items() if value not in (None, "")]
    if len(chosen) > 1:
        raise InvalidSpecError(f"{what}: give exactly one of {', '.join(values)}; got {', '.join(chosen)}")
    if not chosen and not allow_none:
        raise InvalidSpecError(f"{what}: give one of {', '.join(values)}")
    return chosen[0] if chosen else None


def non_negative_int(value: object, what: str, *, positive: bool = False) -> None:
    """Refuse a ``value`` that is set but not an integer of at least 0 (1 when ``positive``)."""
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, int) or value < (1 if positive else 0):
        kind = "a positive" if positive else "a non-negative"
        raise InvalidSpecError(f"{what} must be {kind} integer, got {value!r}")
