"""The fenced code snippets of README.md and docs/*.md, for the tests that keep the docs true.

``tests/unit/test_docs_snippets.py`` checks that every Python, bash and JSON snippet either comes
from a tested file (an example DAG under ``dags/``, a test under ``tests/``) or is run; the
end-to-end tests take the README quickstart and the documented result keys from here, so a page
that changes is tested as it now reads.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PAGES = (REPO / "README.md", *sorted((REPO / "docs").glob("*.md")))
#: The snippet languages whose snippets must be tested; others (diagrams, log lines, XML) are prose.
TESTED_LANGUAGES = ("python", "bash", "json")
_FENCE = re.compile(r"^```(\w*)\s*$")


@dataclass(frozen=True)
class Snippet:
    """One fenced block: the page, the line of its opening fence, its language and its text."""

    page: str
    line: int
    language: str
    text: str

    @property
    def where(self) -> str:
        return f"{self.page}:{self.line}"


def snippets(pages: tuple[Path, ...] = PAGES) -> list[Snippet]:
    """Every fenced block of the pages, in order."""
    found = []
    for path in pages:
        language, start, lines = None, 0, []
        for number, line in enumerate(path.read_text().splitlines(), start=1):
            fence = _FENCE.match(line)
            if fence and language is None:
                language, start, lines = fence.group(1), number, []
            elif line.strip() == "```" and language is not None:
                found.append(Snippet(str(path.relative_to(REPO)), start, language, "\n".join(lines) + "\n"))
                language = None
            elif language is not None:
                lines.append(line)
    return found


def snippet(page: str, containing: str) -> Snippet:
    """The one snippet of ``page`` whose text contains ``containing``."""
    matches = [s for s in snippets() if s.page == page and containing in s.text]
    assert len(matches) == 1, f"{len(matches)} snippets of {page} contain {containing!r}"
    return matches[0]


def documented_keys(example: Snippet) -> set[str]:
    """The top-level keys a documented result (an XCom, an asset event's extra) shows.

    The examples may elide values (``...``, ``{...}``), so the keys are read as the quoted names
    followed by ``:`` outside any nested object.
    """
    keys, depth = set(), 0
    for match in re.finditer(r'[{}]|"([A-Za-z_][A-Za-z0-9_]*)"\s*:', example.text):
        if match.group(0) == "{":
            depth += 1
        elif match.group(0) == "}":
            depth -= 1
        elif depth == 1:
            keys.add(match.group(1))
    return keys


def listed_keys(page: str, sentence_start: str) -> set[str]:
    """The quoted names in the first ``{...}`` of the prose sentence that starts with ``sentence_start``.

    For results documented as a list in prose, e.g. "The XCom: ``{"table", "snapshot_id", ...}``".
    """
    text = (REPO / page).read_text()
    start = text.index("{", text.index(sentence_start))
    listed = re.sub(r':\s*"[^"]*"', "", text[start : text.index("}", start)])  # drop shown values
    return set(re.findall(r'"([A-Za-z_][A-Za-z0-9_]*)"', listed))


def is_json(example: Snippet) -> bool:
    try:
        json.loads(example.text)
    except ValueError:
        return False
    return True
