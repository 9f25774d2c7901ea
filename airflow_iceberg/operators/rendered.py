"""Turn rendered template fields back into the lists and dicts the job specs take.

Operators store their arguments unchanged in ``__init__``: a template string such as
``"{{ params.partition_by }}"`` or an ``XComArg`` only becomes a value when Airflow renders the
task, after parsing. Rendering without ``render_template_as_native_obj`` always gives a string,
so a list or dict may arrive as its text (``"['days(ts)']"``, ``'{"k": "v"}'``). These helpers
accept that text as well as real lists and dicts, and name the argument when they cannot.
"""

from __future__ import annotations

import ast
import json
from collections.abc import Mapping
from typing import Any

from airflow_iceberg.exceptions import InvalidSpecError


def as_branch(value: Any, what: str = "branch") -> str | None:
    """A branch name, or None for ``main``; a blank one is refused, not read as ``main``.

    ``branch="{{ ... }}"`` that renders nothing is a missing branch name, not a request for
    ``main``: a write-audit-publish write would otherwise land on ``main`` unaudited, and its audit
    read ``main``.
    """
    if value is None:
        return None
    if not str(value).strip():
        raise InvalidSpecError(
            f"{what} is empty ({value!r}: a template that rendered nothing?); give the branch, "
            f"or leave {what} unset for main"
        )
    return value


def as_list(value: Any, what: str) -> list[Any]:
    """A list from a list, a tuple, a rendered list literal, or one plain string or mapping (one item)."""
    if value is None:
        return []
    if isinstance(value, str):
        text = value.strip()
        if not text:
            return []
        if not text.startswith(("[", "(")):
            return [text]
        value = _literal(text, what)
    if isinstance(value, (list, tuple)):
        return list(value)
    if isinstance(value, Mapping):
        return [value]
    raise InvalidSpecError(f"{what} must be a list, got {type(value).__name__} {value!r}")


def as_dict(value: Any, what: str) -> dict[str, Any]:
    """A dict from a mapping or a rendered dict literal (JSON or Python); ``None`` is empty."""
    if value is None:
        return {}
    if isinstance(value, str):
        text = value.strip()
        if not text:
            return {}
        if text.startswith("{"):
            value = _literal(text, what)
    if isinstance(value, Mapping):
        return dict(value)
    raise InvalidSpecError(f"{what} must be a mapping, got {type(value).__name__} {value!r}")


def as_int(value: Any, what: str) -> int | None:
    """An integer from an int or its rendered text (templates render numbers as strings); empty is None."""
    if value is None or value == "":
        return None
    if isinstance(value, str) and value.strip().isdigit():
        return int(value)
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidSpecError(f"{what} must be an integer, got {value!r}")
    return value


def _literal(text: str, what: str) -> Any:
    """Parse JSON first (what ``tojson`` renders), then a Python literal (what ``{{ list }}`` renders)."""
    try:
        return json.loads(text)
    except ValueError:
        pass
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError) as error:
        raise InvalidSpecError(f"{what} {text!r} is neither JSON nor a Python literal: {error}") from None
