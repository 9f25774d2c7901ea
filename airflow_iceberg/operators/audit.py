"""The audit gate of write-audit-publish: declarative checks on a branch's snapshot, before publish.

The job resolves the branch (or tag) to one snapshot id and measures every rule over exactly that
snapshot in one aggregate query, reading only. The task then passes or fails on the report: a
failed audit pushes the report to XCom first, then fails without retrying (the same snapshot
would fail the same way), so nothing downstream publishes it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from airflow.sdk.exceptions import AirflowFailException

from airflow_iceberg.exceptions import InvalidSpecError
from airflow_iceberg.jobs.spec.audits import RULE_FIELDS, AuditSpec
from airflow_iceberg.operators.base import IcebergSparkSubmitOperator
from airflow_iceberg.operators.rendered import as_branch, as_dict, as_list
from airflow_iceberg.timestamps import to_snapshot_id

#: The XCom key of the report: the task's return value, pushed before a failed audit fails.
REPORT_KEY = "return_value"


class IcebergAuditFailedError(AirflowFailException):
    """An audit found broken rules; the message lists each. Never retried: the same snapshot fails again.

    Defined here, not in :mod:`airflow_iceberg.exceptions`, which the job package (without
    Airflow) imports too.
    """


class IcebergAuditOperator(IcebergSparkSubmitOperator):
    """Audit one snapshot of an Iceberg table: fail, listing every broken rule, unless all hold.

    The snapshot is a branch's head (``branch``), a tag's (``tag``), a given ``snapshot_id``, or
    with none of them ``main``'s. It is resolved once, and every rule is measured on exactly it,
    so a commit that lands on the branch during the audit is not half-audited. Give at least one
    rule. The table is an inlet; nothing is written.

    The XCom (pushed also when the audit fails) is ``{"table", "selector", "ref", "snapshot_id",
    "row_count", "passed", "rules", "failures"}``: ``snapshot_id`` is the audited snapshot, to
    pin with ``IcebergPublishOperator(expected_snapshot_id=...)``; ``rules`` has one entry per
    rule with its ``rule`` kind, what it names, ``measured`` and ``passed``; ``failures`` one line
    per broken rule.

    :param branch: Audit the head of this branch. (templated)
    :param tag: Audit the snapshot this tag points at; one that renders empty is refused, not
        read as ``main`` (as for ``branch``). (templated)
    :param snapshot_id: Audit this snapshot; one that renders empty is refused. (templated)
    :param min_rows: The snapshot holds at least this many rows. (templated)
    :param max_rows: The snapshot holds at most this many rows. (templated)
    :param not_null: Columns that hold no NULL. (templated)
    :param unique: Keys no two rows share: each a column or a list of columns; NULLs count as
        equal, as in ``GROUP BY``. (templated)
    :param accepted_values: Column -> the values it may hold, in the column's kind (strings,
        numbers, booleans, dates and timestamps as text); a NULL is neither accepted nor refused
        (``not_null`` is for those). (templated)
    :param row_conditions: Rule name -> a Spark SQL boolean expression every row must satisfy; a
        row where it is NULL does not. (templated)
    :param aggregate_conditions: Rule name -> a Spark SQL boolean expression over aggregates of
        the whole snapshot that must be true, e.g. ``"count_if(amount <= 0) <= 3"``. (templated)
    """

    reads_table = True
    template_fields: Sequence[str] = (
        *IcebergSparkSubmitOperator.template_fields,
        "branch",
        "tag",
        "snapshot_id",
        *RULE_FIELDS,
    )

    def __init__(
        self,
        *,
        branch: str | None = None,
        tag: str | None = None,
        snapshot_id: int | str | None = None,
        min_rows: int | str | None = None,
        max_rows: int | str | None = None,
        not_null: Sequence[str] | str = (),
        unique: Sequence[str | Sequence[str]] | str = (),
        accepted_values: Mapping[str, Sequence[Any]] | str | None = None,
        row_conditions: Mapping[str, str] | str | None = None,
        aggregate_conditions: Mapping[str, str] | str | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.branch = branch
        self.tag = tag
        self.snapshot_id = snapshot_id
        self.min_rows = min_rows
        self.max_rows = max_rows
        self.not_null = not_null
        self.unique = unique
        self.accepted_values = accepted_values
        self.row_conditions = row_conditions
        self.aggregate_conditions = aggregate_conditions
        #: As given, before rendering: a tag or snapshot asked for must not render to nothing.
        self._selectors_given = {"tag": tag, "snapshot_id": snapshot_id}

    def build_spec(self) -> AuditSpec:
        return AuditSpec(
            table=self.table,
            branch=as_branch(self.branch),
            tag=self._selector("tag"),
            snapshot_id=to_snapshot_id(self._selector("snapshot_id")),
            min_rows=_as_count(self.min_rows),
            max_rows=_as_count(self.max_rows),
            not_null=tuple(as_list(self.not_null, "not_null")),
            unique=_rendered_list(self.unique, "unique"),
            accepted_values=as_dict(self.accepted_values, "accepted_values"),
            row_conditions=as_dict(self.row_conditions, "row_conditions"),
            aggregate_conditions=as_dict(self.aggregate_conditions, "aggregate_conditions"),
        )

    def _selector(self, name: str) -> Any:
        """The rendered ``tag`` or ``snapshot_id``; refused when one was given and it rendered to nothing.

        With neither, the audit checks ``main``: a ``tag="{{ params.tag }}"`` or a ``snapshot_id``
        template that renders ``""`` (or ``None`` natively) would otherwise audit ``main`` and
        report it as the audited snapshot, passing on data no one asked about.
        """
        given, rendered = self._selectors_given[name], getattr(self, name)
        if given is not None and (rendered is None or not str(rendered).strip()):
            raise InvalidSpecError(
                f"{name} is empty ({rendered!r}: a template that rendered nothing?); give the {name} "
                f"to audit, or leave {name} unset to audit main"
            )
        return rendered

    def execute(self, context: Any) -> dict[str, Any]:
        report = super().execute(context)
        if not report.get("passed"):
            ti = context.get("ti")
            if ti is not None:  # the report is what a user opens first; a failed task returns nothing
                ti.xcom_push(key=REPORT_KEY, value=report)
            broken = "\n".join(f"  - {line}" for line in report.get("failures", []))
            raise IcebergAuditFailedError(
                f"audit of {report.get('table')} at snapshot {report.get('snapshot_id')} "
                f"({report.get('ref') or 'snapshot_id'}) failed {len(report.get('failures', []))} of "
                f"{len(report.get('rules', []))} rules; nothing downstream should publish it:\n{broken}"
            )
        return report

    def log_result(self, result: Mapping[str, Any]) -> None:
        self.log.info(
            "Audited %s at snapshot %s (%s): %s rows, %s of %s rules hold",
            result.get("table"),
            result.get("snapshot_id"),
            result.get("ref") or "snapshot_id",
            result.get("row_count"),
            sum(1 for rule in result.get("rules", []) if rule.get("passed")),
            len(result.get("rules", [])),
        )


def _as_count(value: object) -> object:
    """A rendered row bound as an int; anything else goes to the spec unchanged, which refuses it."""
    if value is None or (isinstance(value, str) and not value.strip()):
        return None
    if isinstance(value, str) and value.strip().isdigit():
        return int(value.strip())
    return value


def _rendered_list(value: object, what: str) -> object:
    """A list from a rendered list literal; any other value unchanged, for the spec to judge.

    Not :func:`as_list`: ``unique="order_id"`` is refused as not a list of keys rather than read
    as one key, since a string where a list of keys belongs is more likely a mistake.
    """
    if isinstance(value, str) and not value.strip():
        return ()
    if isinstance(value, str) and value.strip().startswith(("[", "(")):
        return tuple(as_list(value, what))
    return tuple(value) if isinstance(value, list) else value
