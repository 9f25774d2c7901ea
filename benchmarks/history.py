"""Comparison #4: time-travel reads on tables with 10, 100 and 1,000 snapshots.

The tables are built by one SparkSession (:mod:`benchmarks.spark_jobs.build_history`), which
also times warm in-session reads. Then the read operator (``airflow tasks test``) reads each
table as of its 5th snapshot, interleaved across tables, while :class:`FileOpenWatch` records
which files of the table's ``metadata/`` folder were opened. pyiceberg, reading the same
metadata independently, says what that snapshot needs: its manifest list, the manifests in it,
the data files a scan plans. The read passes when it opened exactly that, whatever the history.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from airflow_iceberg.catalog.config import config_from_fields
from airflow_iceberg.catalog.spark_settings import spark_settings
from benchmarks.file_opens import FileOpenWatch
from benchmarks.results import Row, Section, millis, times, verdict
from benchmarks.results import seconds as fmt
from benchmarks.stats import interleave, median
from benchmarks.workspace import CATALOG, BenchWorkspace, last_json_line

BUILD_JOB = Path(__file__).resolve().parent / "spark_jobs" / "build_history.py"
NTH = 5  # read each table as of its 5th snapshot: the same data, only the history after it differs
IN_SESSION_READS = 15  # warm reads are ~0.1 s each: many samples are cheap and steady the median
_METADATA_JSON = re.compile(r"^v\d+\.metadata\.json$")
_ROWS_READ = re.compile(r"Read (\d+) rows from")


def table_name(snapshots: int) -> str:
    return f"bench.history_{snapshots}"


@dataclass(frozen=True)
class Needed:
    """What pyiceberg says reading one snapshot needs, and how big the whole history is."""

    snapshot_id: int
    manifest_list: str
    manifests: frozenset[str]
    planned_files: int
    planned_records: int
    history_manifest_lists: int
    history_manifests: int
    metadata_json_bytes: int


def needed_for(ws: BenchWorkspace, table: str, nth: int) -> Needed:
    from pyiceberg.table import StaticTable

    from scripts.show_table import latest_metadata

    iceberg = StaticTable.from_metadata(str(latest_metadata(ws.warehouse, table)))
    snapshots = iceberg.snapshots()
    snapshot = snapshots[nth - 1]
    tasks = list(iceberg.scan(snapshot_id=snapshot.snapshot_id).plan_files())
    every_manifest = {m.manifest_path for s in snapshots for m in s.manifests(iceberg.io)}
    return Needed(
        snapshot_id=snapshot.snapshot_id,
        manifest_list=Path(snapshot.manifest_list).name,
        manifests=frozenset(Path(m.manifest_path).name for m in snapshot.manifests(iceberg.io)),
        planned_files=len(tasks),
        planned_records=sum(task.file.record_count for task in tasks),
        history_manifest_lists=len(snapshots),
        history_manifests=len(every_manifest),
        metadata_json_bytes=Path(iceberg.metadata_location.removeprefix("file:")).stat().st_size,
    )


@dataclass(frozen=True)
class Opened:
    """The table metadata files one read opened (Hadoop's ``.crc`` side files left out)."""

    manifest_lists: frozenset[str]
    manifests: frozenset[str]
    metadata_json_opens: int
    rows_read: int

    @classmethod
    def classify(cls, opens: Counter[str], task_output: str) -> Opened:
        names = [name for name in opens if not name.startswith(".")]
        rows = _ROWS_READ.search(task_output)
        return cls(
            rows_read=int(rows.group(1)) if rows else -1,
            manifest_lists=frozenset(n for n in names if n.startswith("snap-") and n.endswith(".avro")),
            manifests=frozenset(n for n in names if n.endswith(".avro") and not n.startswith("snap-")),
            metadata_json_opens=sum(opens[n] for n in names if _METADATA_JSON.match(n)),
        )


def build(ws: BenchWorkspace, counts: tuple[int, ...], repetitions: int) -> dict:
    """Build every table in one spark-submit; returns its JSON (build and in-session read times)."""
    extra = ws.connections["iceberg_catalog_default"]["extra"]
    settings = spark_settings(config_from_fields(extra=extra))
    assert not settings.secret_conf, "the bench's local Hadoop catalog has no secrets to keep off argv"
    conf = {**settings.conf, f"spark.sql.catalog.{CATALOG}.cache-enabled": "false"}
    spec = {
        "tables": {f"{CATALOG}.{table_name(n)}": n for n in counts},
        "nth": NTH,
        "repetitions": repetitions,
    }
    argv = [
        "spark-submit",
        "--master",
        ws.connections["spark_default"]["host"],
        "--name",
        "airflow-iceberg-bench-history",
        "--jars",
        ",".join(settings.jars),
    ]
    for key, value in conf.items():
        argv += ["--conf", f"{key}={value}"]
    completed = subprocess.run(
        [*argv, str(BUILD_JOB), json.dumps(spec)], capture_output=True, text=True, check=False
    )
    if completed.returncode != 0:
        raise RuntimeError(f"building the history tables failed:\n{completed.stderr[-6000:]}")
    return last_json_line(completed.stdout)


def run(ws: BenchWorkspace, repetitions: int, counts: tuple[int, ...]) -> Section:
    print(f"==> #4 history: building tables with {', '.join(map(str, counts))} snapshots", file=sys.stderr)
    built = build(ws, counts, repetitions=IN_SESSION_READS)
    needed = {n: needed_for(ws, table_name(n), NTH) for n in counts}
    opened: dict[int, list[Opened]] = {n: [] for n in counts}

    def read(n: int) -> float:
        with FileOpenWatch(ws.table_dir(table_name(n)) / "metadata") as watch:
            run_ = ws.run_task(
                "time_travel_read", table=table_name(n), snapshot_id=str(needed[n].snapshot_id)
            )
        opened[n].append(Opened.classify(watch.opens, run_.output))
        return run_.seconds

    samples = interleave({f"read_{n}": (lambda n=n: read(n)) for n in counts}, repetitions)
    return summarize(samples, built, needed, opened, counts)


def summarize(
    samples: dict[str, list[float]],
    built: dict,
    needed: dict[int, Needed],
    opened: dict[int, list[Opened]],
    counts: tuple[int, ...],
) -> Section:
    section = Section(
        4,
        f"History growth: time-travel read of snapshot #{NTH} as the history grows",
        "read task (`airflow tasks test`)",
        "warm in-session read",
        samples=samples,
    )
    base = median(samples[f"read_{counts[0]}"])
    in_session = {n: built["read_seconds"][f"{CATALOG}.{table_name(n)}"] for n in counts}
    loads = {n: built["load_seconds"][f"{CATALOG}.{table_name(n)}"] for n in counts}
    for n in counts:
        section.samples[f"in_session_{n}"] = in_session[n]
        section.samples[f"in_session_load_{n}"] = loads[n]
        task, warm = median(samples[f"read_{n}"]), median(in_session[n])
        section.rows.append(
            Row(
                f"table with {n:,} snapshots (ratios: vs {counts[0]} snapshots)",
                fmt(task),
                millis(warm),
                f"{times(task / base)} / {times(warm / median(in_session[counts[0]]))}",
                "show growth",
            )
        )
    for n in counts:
        need, seen = needed[n], opened[n]
        exact = all(
            o.manifest_lists == {need.manifest_list}
            and o.manifests == need.manifests
            and o.rows_read == need.planned_records
            for o in seen
        )
        section.rows.append(
            Row(
                f"  {n:,} snapshots: manifest lists / manifests opened "
                f"(table has {need.history_manifest_lists:,} / {need.history_manifests:,})",
                f"{len(seen[-1].manifest_lists)} / {len(seen[-1].manifests)}",
                f"1 / {len(need.manifests)} needed",
                target="only the snapshot's",
                verdict=verdict(exact),
            )
        )
    build = built["build_seconds"]
    built_text = ", ".join(f"{n:,} snapshots in {build[f'{CATALOG}.{table_name(n)}']:.1f} s" for n in counts)
    json_opens = ", ".join(str(opened[n][-1].metadata_json_opens) for n in counts)
    json_sizes = ", ".join(f"{needed[n].metadata_json_bytes / 1024:,.0f} KiB" for n in counts)
    last = needed[counts[-1]]
    load_text = ", ".join(f"{millis(median(loads[n]))} ({n:,})" for n in counts)
    section.notes += [
        f"Of the warm in-session read, loading the table as of the snapshot (metadata.json parse and "
        f"snapshot lookup, the part history length can affect) took: {load_text}.",
        f"Build (one SparkSession, one INSERT per snapshot): {built_text}.",
        "Needed = pyiceberg's view of the same snapshot (its manifest list and manifests); opened = files of "
        "the table's metadata/ folder the read task opened (Linux inotify), checked on every repetition, "
        "together with the task's row count against pyiceberg's planned records. "
        f"pyiceberg plans {last.planned_files} data files ({last.planned_records} rows) for snapshot #{NTH} "
        "in every table.",
        "What does grow: the table's current metadata.json, which lists every snapshot and is read whole "
        f"(opened {json_opens} times per read): {json_sizes}.",
    ]
    return section
