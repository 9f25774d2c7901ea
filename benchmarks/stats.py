"""Interleaved repetitions and their medians: the measuring discipline every comparison shares.

Sides are run A, B, A, B, ... rather than all A then all B, so a burst of load from another
process (other engineers' test runs share this machine) lands on both sides alike and the
ratio of medians stays meaningful even when absolute times do not.
"""

from __future__ import annotations

import statistics
import sys
from collections.abc import Callable, Mapping


def interleave(arms: Mapping[str, Callable[[], float]], repetitions: int) -> dict[str, list[float]]:
    """Run each arm once per repetition, in order, and collect the seconds each one reports.

    An arm returns its own measurement, so it can time exactly what it means to compare (a whole
    subprocess, or only the part inside it).
    """
    samples: dict[str, list[float]] = {name: [] for name in arms}
    for repetition in range(1, repetitions + 1):
        for name, arm in arms.items():
            seconds = arm()
            samples[name].append(seconds)
            print(f"    [{repetition}/{repetitions}] {name}: {seconds:.3f} s", file=sys.stderr, flush=True)
    return samples


def median(values: list[float]) -> float:
    return statistics.median(values)


def spread(values: list[float]) -> str:
    """``min-max`` of the samples, so a reader sees how noisy a median is."""
    return f"{min(values):.2f}-{max(values):.2f}"
