"""The rows the benchmarks write: one Spark SQL query over ``range(n)``, used by both sides.

The operator side receives it as the task's ``source_query`` param and the plain-Spark side as
an argument, so both write byte-for-byte the same query's rows.
"""

from __future__ import annotations


def rows_query(rows: int) -> str:
    """``rows`` deterministic orders: a bigint key, an int, a double and a date (4 columns)."""
    return (
        "SELECT id AS order_id, CAST(id % 1000 AS INT) AS customer_id, "
        "CAST(id % 10007 AS DOUBLE) / 100 AS amount, "
        f"DATE_ADD(DATE'2024-01-01', CAST(id % 30 AS INT)) AS order_date FROM range({int(rows)})"
    )
