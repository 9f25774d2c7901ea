"""``make bench``: run the comparisons, print the summary table, write benchmarks/RESULTS.md.

    python -m benchmarks.run [--repetitions N] [--quick] [--only 1,3]

Exits 1 only when an invariant breaks (pyspark or pyiceberg imported while parsing DAGs);
performance targets are reported as PASS or MISS and never fail the run.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from benchmarks import history, machine, overhead, parse_cost, story, throughput
from benchmarks.report import console_table, markdown
from benchmarks.results import Section
from benchmarks.stats import median
from benchmarks.workspace import BenchWorkspace

RESULTS = Path(__file__).resolve().parent / "RESULTS.md"
SIZES = (1_000_000, 10_000_000)
HISTORIES = (10, 100, 1000)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.run", description=__doc__.splitlines()[0])
    parser.add_argument(
        "--repetitions", type=int, default=3, help="interleaved repetitions per side (default 3)"
    )
    parser.add_argument(
        "--quick",
        action="store_true",
        help="one repetition, 1M rows only, 10 and 100 snapshots: a smoke run, not a result",
    )
    parser.add_argument(
        "--only", default="1,2,3,4,5", help="comma-separated comparisons to run (default all)"
    )
    parser.add_argument("--output", type=Path, default=RESULTS, help="where to write the results (markdown)")
    return parser.parse_args(argv)


def run_sections(ws: BenchWorkspace, args: argparse.Namespace) -> list[Section]:
    only = {int(part) for part in args.only.split(",")}
    reps = 1 if args.quick else args.repetitions
    sizes = SIZES[:1] if args.quick else SIZES
    histories = HISTORIES[:2] if args.quick else HISTORIES
    sections: list[Section] = []
    if 1 in only:
        sections.append(overhead.run(ws, reps))
    if 2 in only:
        sections.append(parse_cost.run(ws, 3 * reps))
    if 3 in only:
        task_cost = median(sections[0].samples["airflow_noop"]) if 1 in only else None
        sections.append(throughput.summarize(throughput.run(ws, reps, sizes), sizes, task_cost))
    if 4 in only:
        sections.append(history.run(ws, reps, histories))
    if 5 in only:
        sections.append(story.run(ws, reps))
    return sections


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
    print("\n" + console_table(sections))
    for section in sections:
        for text in section.misses:
            print(f"MISS #{section.number}: {text}")
    args.output.write_text(markdown(sections, facts, run_info))
    print(f"\nwrote {args.output} ({run_info['bench wall time']})")
    return 1 if any(section.failed for section in sections) else 0


if __name__ == "__main__":
    sys.exit(main())
