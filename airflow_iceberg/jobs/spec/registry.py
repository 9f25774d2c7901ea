"""Every action spec, by the job subcommand that runs it; the job's parser is built from them."""

from __future__ import annotations

import argparse

from airflow_iceberg.jobs.spec.action import ActionSpec
from airflow_iceberg.jobs.spec.audits import AuditSpec
from airflow_iceberg.jobs.spec.branches import PublishSpec, RollbackSpec, TagSpec
from airflow_iceberg.jobs.spec.reads import ReadSpec
from airflow_iceberg.jobs.spec.row_changes import DeleteSpec, MergeSpec
from airflow_iceberg.jobs.spec.upkeep import (
    ExpireSnapshotsSpec,
    OrphanFilesSpec,
    RewriteDataFilesSpec,
    RewriteManifestsSpec,
    RewritePositionDeletesSpec,
)
from airflow_iceberg.jobs.spec.writes import WriteSpec

#: Every action spec, by the job subcommand that runs it (``spec.action``), in the parser's order.
ACTION_SPECS: dict[str, type[ActionSpec]] = {
    spec.action: spec
    for spec in (
        WriteSpec,
        ReadSpec,
        OrphanFilesSpec,
        MergeSpec,
        DeleteSpec,
        PublishSpec,
        TagSpec,
        ExpireSnapshotsSpec,
        RewriteDataFilesSpec,
        RewriteManifestsSpec,
        RewritePositionDeletesSpec,
        RollbackSpec,
        AuditSpec,
    )
}


def add_action_parsers(parser: argparse.ArgumentParser) -> None:
    """Give ``parser`` one subcommand per action, with the flags its spec declares (``add_arguments``)."""
    actions = parser.add_subparsers(dest="action", required=True)
    for name, spec_class in ACTION_SPECS.items():
        spec_class.add_arguments(actions.add_parser(name))


def spec_from_args(args: argparse.Namespace) -> ActionSpec:
    """The spec of the subcommand ``args`` were parsed for, read by its ``from_args``; not yet validated."""
    return ACTION_SPECS[args.action].from_args(args)
