"""What a comparison reports: rows for the summary table, plus notes that explain the numbers."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path

PASS, MISS, INFO, FAIL = "PASS", "MISS", "info", "FAIL"


@dataclass
class Row:
    """One line of the summary table: medians of both sides, their ratio and the verdict."""

    measure: str
    a: str
    b: str = "—"
    ratio: str = "—"
    target: str = "—"
    verdict: str = INFO


@dataclass
class Section:
    """One comparison of `make bench`."""

    number: int
    title: str
    a_label: str
    b_label: str
    rows: list[Row] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    #: For each missed target: its cause, as measured (goes to RESULTS.md "Targets missed, and why").
    misses: list[str] = field(default_factory=list)
    samples: dict[str, list[float]] = field(default_factory=dict)
    #: When and under what load this comparison ran (filled by ``benchmarks.run``).
    measured: str = ""
    #: Markdown lines shown after the notes (tables too detailed for the summary).
    details: list[str] = field(default_factory=list)

    @property
    def failed(self) -> bool:
        """A broken invariant (not a missed target): the benchmark run must exit non-zero."""
        return any(row.verdict == FAIL for row in self.rows)


def verdict(ok: bool) -> str:
    return PASS if ok else MISS


def seconds(value: float) -> str:
    return f"{value:.2f} s"


def millis(value: float) -> str:
    return f"{value * 1000:.1f} ms"


def times(value: float) -> str:
    return f"{value:.2f}x"


def save(path: Path, sections: list[Section]) -> None:
    """Keep the sections as JSON beside RESULTS.md, so ``--update`` can re-run some and keep the rest."""
    path.write_text(json.dumps([asdict(section) for section in sections], indent=1) + "\n")


def load(path: Path) -> list[Section]:
    """The sections a previous run saved (none if it saved nothing)."""
    if not path.is_file():
        return []
    sections = []
    for data in json.loads(path.read_text()):
        data["rows"] = [Row(**row) for row in data["rows"]]
        sections.append(Section(**data))
    return sections
