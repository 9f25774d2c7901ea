"""The one error of the contract: a spec that is invalid, named by its field."""

from __future__ import annotations


class InvalidSpecError(ValueError):
    """A job specification is invalid; the message names the offending field.

    Defined here rather than in ``airflow_iceberg.exceptions`` because the job package runs
    on the cluster without the Airflow side; ``airflow_iceberg.exceptions`` re-exports it.
    """
