"""docs/guarantees.md is a ledger: every promise names the tests that inject its fault.

A renamed or deleted test would leave a promise with no proof while the page still claims one,
so every ``path::test_name`` the ledger's tables name must be a test that exists.
"""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
#: ``tests/x.py::test_name`` or, after one in the same cell, ``::test_name`` (same file).
REFERENCE_RE = re.compile(r"`((?:tests/[\w/]+\.py)?)::(\w+)(?:\[[^\]`]*\])?`")


def ledger_references() -> list[tuple[str, str]]:
    references = []
    for line in (REPO / "docs" / "guarantees.md").read_text().splitlines():
        if not line.startswith("|"):
            continue
        current = None
        for path, name in REFERENCE_RE.findall(line):
            current = path or current
            references.append((current or "", name))
    return references


def test_every_test_the_ledger_names_exists():
    references = ledger_references()
    assert len(references) > 100  # the ledger's tables were read
    missing = [
        f"{path}::{name}"
        for path, name in references
        if not path
        or not (REPO / path).is_file()
        or not re.search(rf"^\s*(async )?def {name}\(", (REPO / path).read_text(), re.M)
    ]
    assert missing == []
