"""``make bench``: run the comparisons, print the summary table, write benchmarks/RESULTS.md.

    python -m benchmarks.run [--repetitions N] [--quick] [--only 1,3] [--update]
                             [--batches 16] [--cluster-rows 100000000]

Exits 1 only when an invariant breaks (pyspark or pyiceberg imported while parsing DAGs);
performance targets are reported as PASS or MISS and never fail the run.
"""

from __future__ import annotations

import argparse
import sys
import time
import traceback
from collections.abc import Callable
from pathlib import Path

from benchmarks import (
    connect_mode,
    history,
    machine,
    metadata_steps,
    overhead,
    parse_cost,
    scale_out,
    scheduler_stories,
    story,
    throughput,
)
from benchmarks.report import console_table, markdown
from benchmarks.results import FAIL, INFO, Row, Section, load, save
from benchmarks.stats import median
from benchmarks.workspace import BenchWorkspace

RESULTS = Path(__file__).resolve().parent / "RESULTS.md"
#: The sections of the latest run as data, for ``--update``.
RESULTS_DATA = Path(__file__).resolve().parent / "results.json"
SIZES = (1_000_000, 10_000_000)
HISTORIES = (10, 100, 1000)
#: #8: mapped appends at once, and the rows of the standalone cluster's append (quick: fewer).
BATCHES, QUICK_BATCHES = 16, 4
CLUSTER_ROWS, QUICK_CLUSTER_ROWS = 100_000_000, 1_000_000


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.run", description=__doc__.splitlines()[0])
    parser.add_argument(
        "--repetitions", type=int, default=3, help="interleaved repetitions per side (default 3)"
    )
    parser.add_argument(
        "--quick",
        action="store_true",
        help="one repetition, 1M rows only, 10 and 100 snapshots, #8 with "
        f"{QUICK_BATCHES} appends and {QUICK_CLUSTER_ROWS:,} rows: a smoke run, not a result",
    )
    parser.add_argument(
        "--only", default="1,2,3,4,5,6,7,8,9", help="comma-separated comparisons to run (default all)"
    )
    parser.add_argument(
        "--batches", type=int, default=None, help=f"#8: mapped appends at once (default {BATCHES})"
    )
    parser.add_argument(
        "--cluster-rows",
        type=int,
        default=None,
        help=f"#8: rows of the append on the standalone cluster (default {CLUSTER_ROWS:,})",
    )
    parser.add_argument(
        "--update",
        action="store_true",
        help="keep the other comparisons' results from the last run (benchmarks/results.json) in the output",
    )
    parser.add_argument("--output", type=Path, default=RESULTS, help="where to write the results (markdown)")
    return parser.parse_args(argv)


def run_sections(ws: BenchWorkspace, args: argparse.Namespace) -> list[Section]:
    only = {int(part) for part in args.only.split(",")}
    reps = 1 if args.quick else args.repetitions
    sizes = SIZES[:1] if args.quick else SIZES
    histories = HISTORIES[:2] if args.quick else HISTORIES
    batches = args.batches or (QUICK_BATCHES if args.quick else BATCHES)
    cluster_rows = args.cluster_rows or (QUICK_CLUSTER_ROWS if args.quick else CLUSTER_ROWS)
    sections: list[Section] = []
    runs = {
        1: lambda: overhead.run(ws, reps),
        2: lambda: parse_cost.run(ws, 3 * reps),
        3: lambda: throughput.summarize(throughput.run(ws, reps, sizes), sizes, task_cost(sections)),
        4: lambda: history.run(ws, reps, histories),
        5: lambda: story.run(ws, reps),
        6: lambda: connect_comparison(ws, reps, sizes),
        7: lambda: scheduler_stories.run(ws, reps),
        8: lambda: scale_out.run(ws, reps, batches, cluster_rows),
        9: lambda: metadata_steps.run(ws, reps),
    }
    for number, run in runs.items():
        if number in only:
            load_before, started, started_at = machine.load_average(), time.monotonic(), machine.now()
            section = run_one(number, run)
            section.measured = (
                f"from {started_at}, in {(time.monotonic() - started) / 60:.1f} min; load average "
                f"(1/5/15 min) {load_before} before, {machine.load_average()} after"
            )
            sections.append(section)
    return sections


def run_one(number: int, run: Callable[[], Section]) -> Section:
    """Run one comparison; one that crashes is a FAIL row saying why, and the others still run.

    A full ``make bench`` takes hours: a comparison broken by a change elsewhere (a renamed
    setting, a task that now fails) must not throw away the ones measured before and after it.
    """
    try:
        return run()
    except Exception as error:
        traceback.print_exc()
        section = Section(number, f"comparison #{number}", "A", "B")
        first_line = (str(error).splitlines() or [""])[0]  # a table row: the rest is in the run's output
        why = f"did not run: {type(error).__name__}: {first_line}"[:300]
        section.rows.append(Row(why, "—", verdict=FAIL))
        return section


def task_cost(sections: list[Section]) -> float | None:
    """Airflow's fixed per-task cost measured by #1 in this run, if it ran."""
    overhead_section = next((section for section in sections if section.number == 1), None)
    noop = overhead_section.samples.get("airflow_noop") if overhead_section else None
    return median(noop) if noop else None


def connect_comparison(ws: BenchWorkspace, reps: int, sizes: tuple[int, ...]) -> Section:
    """#6, or a row saying why it cannot run here (no Spark 4.0 runtime or Connect server helper)."""
    reason = connect_mode.connect_unavailable_reason()
    if reason is None:
        return connect_mode.run(ws, reps, (connect_mode.SMALL, *sizes[1:]))
    section = Section(6, "Spark Connect mode vs spark-submit mode", "Spark Connect mode", "spark-submit mode")
    section.rows.append(Row(f"not run: {reason}", "—", verdict=INFO))
    return section


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    facts = machine.facts()
    load_before, started = machine.load_average(), time.monotonic()
    ws = BenchWorkspace.create()
    try:
        sections = run_sections(ws, args)
    finally:
        ws.close()
    run_info = {
        "load average (1/5/15 min) before": load_before,
        "load average after": machine.load_average(),
        "bench wall time": f"{(time.monotonic() - started) / 60:.1f} min",
        "mode": "quick (smoke run)" if args.quick else f"{args.repetitions} repetitions per side",
    }
    if args.update:
        rerun = {section.number for section in sections}
        kept = [section for section in load(RESULTS_DATA) if section.number not in rerun]
        sections = sorted(kept + sections, key=lambda section: section.number)
        run_info["mode"] += f"; comparisons {', '.join(str(n) for n in sorted(rerun))} re-run with --update"
    print("\n" + console_table(sections))
    for section in sections:
        for text in section.misses:
            print(f"MISS #{section.number}: {text}")
    args.output.write_text(markdown(sections, facts, run_info))
    if args.output == RESULTS:
        save(RESULTS_DATA, sections)
    print(f"\nwrote {args.output} ({run_info['bench wall time']})")
    return 1 if any(section.failed for section in sections) else 0


if __name__ == "__main__":
    sys.exit(main())
