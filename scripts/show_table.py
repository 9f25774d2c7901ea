"""Print what an Iceberg table in a Hadoop warehouse holds, read independently with pyiceberg.

Used by ``make demo``: pyiceberg reads the table's own metadata files, so what it prints does
not depend on the Spark job that wrote them.

    python scripts/show_table.py WAREHOUSE_DIR NAMESPACE.TABLE
"""

from __future__ import annotations

import re
import sys
from datetime import datetime, timezone
from pathlib import Path

from pyiceberg.table import StaticTable


def latest_metadata(warehouse: Path, identifier: str) -> Path:
    """The newest ``vN.metadata.json`` of a Hadoop-catalog table (what version-hint.text points at)."""
    table_dir = warehouse.joinpath(*identifier.split("."))
    candidates = list((table_dir / "metadata").glob("v*.metadata.json"))
    if not candidates:
        raise FileNotFoundError(f"no Iceberg metadata under {table_dir}")
    return max(candidates, key=lambda path: int(re.match(r"v(\d+)", path.name).group(1)))


def load_table(warehouse: Path | str, identifier: str) -> StaticTable:
    """The table as its newest metadata file describes it: an independent, read-only view."""
    return StaticTable.from_metadata(str(latest_metadata(Path(warehouse), identifier)))


def main(warehouse: str, identifier: str) -> None:
    table = load_table(warehouse, identifier)
    print(f"\nTable {identifier}  ({table.metadata_location})")
    print(f"Schema: {', '.join(f'{f.name} {f.field_type}' for f in table.schema().fields)}")
    print(f"Partition spec: {table.spec()}")
    print("Snapshots:")
    for snapshot in table.snapshots():
        summary = snapshot.summary
        when = datetime.fromtimestamp(snapshot.timestamp_ms / 1000, tz=timezone.utc).isoformat(
            timespec="seconds"
        )
        print(
            f"  {snapshot.snapshot_id:>20}  {when}  {summary.operation.value:<9}"
            f" added={summary.get('added-records') or 0:>4} deleted={summary.get('deleted-records') or 0:>4}"
            f" total={summary.get('total-records') or 0:>4}"
        )
    rows = table.scan().to_arrow()
    print(f"Current rows: {rows.num_rows}")
    if "order_date" in rows.column_names:
        counts = rows.group_by("order_date").aggregate([("order_id", "count"), ("amount", "sum")])
        for row in sorted(counts.to_pylist(), key=lambda r: r["order_date"]):
            print(f"  {row['order_date']}: {row['order_id_count']} orders, amount {row['amount_sum']}")


if __name__ == "__main__":
    main(*sys.argv[1:3])
