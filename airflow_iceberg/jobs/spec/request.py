"""The whole job invocation: an action's spec, plus the commit id, result file and secrets file.

The operators build a :class:`JobRequest`, turn it into spark-submit application arguments with
``to_argv()``, and the job parses them back with :func:`parse_argv`, which validates the spec
with the same ``validated()`` the operator ran before Spark started. Both directions live in the
package, so the argv format cannot drift between the two sides.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone

from airflow_iceberg.jobs.spec.action import ActionSpec, pairs_argv, parse_pair
from airflow_iceberg.jobs.spec.errors import InvalidSpecError
from airflow_iceberg.jobs.spec.registry import add_action_parsers, spec_from_args

#: Snapshot-summary key that tags each commit with the id of the operator run that made it.
COMMIT_ID_PROPERTY = "airflow-iceberg.commit-id"
#: Snapshot-summary key of a read's sink commit: the snapshot of the source table it copied.
SOURCE_SNAPSHOT_PROPERTY = "airflow-iceberg.source-snapshot-id"


@dataclass(frozen=True)
class JobRequest:
    """A whole job invocation: the action's spec plus where to report and how to tag commits."""

    spec: ActionSpec
    result_file: str | None = None
    commit_id: str | None = None
    commit_properties: dict[str, str] = field(default_factory=dict)
    #: When the table already has a snapshot tagged with ``commit_id``, return it instead of
    #: writing again. With a commit id derived from the Airflow task instance, a retry of a try
    #: that committed and then died commits nothing new.
    reuse_commit: bool = False
    #: A JSON file of secret Spark settings (catalog credentials), readable only by the submitting
    #: user. Only its path travels in argv; the values never do.
    secret_conf_file: str | None = None
    #: Add the keys of the partitions each commit changed to the result (``partition_keys``), for
    #: asset events with a ``partition_key`` (:mod:`airflow_iceberg.jobs.partitions`).
    partition_keys: bool = False
    #: Catalog name -> the folder in the driver where the cluster mounted that catalog's secrets
    #: (a Kubernetes secret; :mod:`airflow_iceberg.jobs.secret_mounts`). Paths only, never values.
    secret_mounts: dict[str, str] = field(default_factory=dict)

    def to_argv(self) -> list[str]:
        argv: list[str] = []
        if self.result_file:
            argv += ["--result-file", self.result_file]
        if self.secret_conf_file:
            argv += ["--secret-conf-file", self.secret_conf_file]
        if self.commit_id:
            argv += ["--commit-id", self.commit_id]
        if self.reuse_commit:
            argv += ["--reuse-commit"]
        if self.partition_keys:
            argv += ["--partition-keys"]
        argv += pairs_argv("--secret-mount", self.secret_mounts)
        argv += pairs_argv("--commit-property", self.commit_properties)
        return argv + self.spec.to_argv()


def _build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="iceberg_job", description="Iceberg DataFrameWriterV2 / reader job")
    parser.add_argument("--result-file")
    parser.add_argument("--secret-conf-file")
    parser.add_argument("--commit-id")
    parser.add_argument("--reuse-commit", action="store_true")
    parser.add_argument("--partition-keys", action="store_true")
    parser.add_argument("--secret-mount", type=parse_pair, action="append", default=[])
    parser.add_argument("--commit-property", type=parse_pair, action="append", default=[])
    add_action_parsers(parser)
    return parser


def parse_argv(argv: Sequence[str]) -> JobRequest:
    """Parse the job's application arguments back into a validated :class:`JobRequest`."""
    args = _build_parser().parse_args(list(argv))
    spec = spec_from_args(args)
    if args.reuse_commit and not args.commit_id:
        raise InvalidSpecError("--reuse-commit needs --commit-id, which identifies the earlier commit")
    return JobRequest(spec=spec.validated(), result_file=args.result_file, commit_id=args.commit_id,
                      commit_properties=dict(args.commit_property), reuse_commit=args.reuse_commit,
                      secret_conf_file=args.secret_conf_file, partition_keys=args.partition_keys,
                      secret_mounts=dict(args.secret_mount))


def committed_at(timestamp_ms: int) -> str:
    """A snapshot's commit time as every result gives it: ISO 8601 in UTC, to the millisecond.

    One function for the job (which describes its commit) and the operator in cluster deploy mode
    (which reads the same commit back from the catalog), so the two results cannot differ.
    """
    millis = int(timestamp_ms)
    moment = datetime.fromtimestamp(millis // 1000, tz=timezone.utc).replace(microsecond=millis % 1000 * 1000)
    return moment.isoformat()


def dump_result(result: Mapping[str, object]) -> str:
    """Serialise a job result the same way on both sides (sorted keys, plain JSON)."""
    return json.dumps(result, sort_keys=True, default=str)
