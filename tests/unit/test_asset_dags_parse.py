"""The asset, sensor and watcher DAGs parse like the examples: no DB, no connections, no pyiceberg.

An ``AssetWatcher``'s trigger and the ``iceberg_asset(...)`` of a consumer's schedule are built at
parse time, so this is where a connection lookup or a heavy import would show.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tests.unit.test_example_dags import PARSE

ASSET_DAGS = Path(__file__).resolve().parents[1] / "integration" / "asset_dags"


def test_asset_dags_parse_without_db_connections_or_heavy_imports():
    completed = subprocess.run(
        [sys.executable, "-c", PARSE, str(ASSET_DAGS)],
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    )
    parsed = json.loads(completed.stdout.strip().splitlines()[-1])
    assert parsed["errors"] == {}
    assert parsed["dags"] == [
        "iceberg_asset_consumer",
        "iceberg_asset_producer",
        "iceberg_asset_watcher",
        "iceberg_asset_watermark",
        "iceberg_daily_page_view_report",  # dags/iceberg_hourly_partitions.py, linked in
        "iceberg_hourly_page_views",
        "iceberg_page_views_setup",
        "iceberg_snapshot_sensor",
        "iceberg_snapshot_sensor_rescheduled",
    ]
    assert parsed["queries"] == []
    assert parsed["lookups"] == []
    assert parsed["heavy_modules"] == []
