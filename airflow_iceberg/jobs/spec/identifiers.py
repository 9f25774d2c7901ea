"""Table, column, branch and tag names: split them the way Spark reads them, validate, quote.

The operators and the job parse every name with :func:`split_identifier`, and the job quotes
every part it puts into SQL (:func:`quote_identifier`), so a name the user typed can never
escape into a statement.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from airflow_iceberg.jobs.spec.errors import InvalidSpecError

_NAME = r"[A-Za-z_][A-Za-z0-9_]*"
#: A plain SQL name: catalog, branch and tag names must be one (a catalog name is a Spark conf key).
SQL_NAME_RE = re.compile(rf"^{_NAME}\Z")
#: A Spark option or catalog property key.
PROPERTY_KEY_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.\-]*\Z")
#: Control characters (C0, DEL, C1): never part of a name, quoted or not.
CONTROL_RE = re.compile(r"[\x00-\x1f\x7f-\x9f]")
#: Characters a name part may only hold inside backticks (whitespace is checked apart).
_QUOTE_ONLY_CHARS = frozenset(".`'\";(),")
#: A name written in a partition transform or a sort order: a backtick-quoted part or a bare one.
COLUMN_PATTERN = r"`(?:[^`]|``)+`|[^\s.`'\";(),]+"


def validate_name(value: str, what: str) -> str:
    """Return ``value`` if it is a plain SQL name (letters, digits, underscores), else raise.

    Plain names need no quoting, so nothing a user types can escape into SQL.
    """
    if not isinstance(value, str) or not SQL_NAME_RE.match(value):
        raise InvalidSpecError(
            f"{what} {value!r} is not a valid name: use letters, digits and underscores, "
            "starting with a letter or underscore"
        )
    return value


def split_identifier(text: str, what: str = "table") -> tuple[str, ...]:
    """Split a dotted identifier into its parts, the way Spark reads a multipart identifier.

    A part is written bare (``sales-eu``, ``Orders``, ``commandes_été``) or in backticks, where a
    doubled backtick stands for one (```my.ns``` is one part holding a dot). A bare part may not
    hold whitespace, dots, backticks, quotes, ``;``, ``(``, ``)``, ``,``, ``--`` or ``/*``: such
    a name must be written in backticks, so a typo or an injection attempt fails here instead of
    being taken as a name. Control characters and empty parts are refused either way. The parts
    come back unquoted; :func:`quote_identifier` quotes every one of them for SQL.
    """
    if not isinstance(text, str) or not text:
        raise InvalidSpecError(f"{what} identifier must be a non-empty string, got {text!r}")
    if CONTROL_RE.search(text):
        raise InvalidSpecError(
            f"{what} identifier {text!r} has an invalid part: it holds a control character"
        )
    parts: list[str] = []
    position = 0
    while True:
        if text.startswith("`", position):
            part, position = _quoted_part(text, position, what)
        else:
            end = text.find(".", position)
            end = len(text) if end < 0 else end
            part, position = text[position:end], end
            _check_bare_part(text, part, what)
        if not part:
            raise InvalidSpecError(f"{what} identifier {text!r} has an invalid part: an empty part")
        parts.append(part)
        if position == len(text):
            return tuple(parts)
        if text[position] != ".":
            raise InvalidSpecError(
                f"{what} identifier {text!r} has an invalid part: a '.' must follow the backtick-quoted "
                f"part {part!r}"
            )
        position += 1
        if position == len(text):
            raise InvalidSpecError(f"{what} identifier {text!r} has an invalid part: an empty part")


def _quoted_part(text: str, start: int, what: str) -> tuple[str, int]:
    """The part in backticks at ``start`` (a doubled backtick is one) and the position after it."""
    pieces, position = [], start + 1
    while True:
        end = text.find("`", position)
        if end < 0:
            raise InvalidSpecError(
                f"{what} identifier {text!r} has an invalid part: a backtick is not closed"
            )
        pieces.append(text[position:end])
        if not text.startswith("``", end):
            return "".join(pieces), end + 1
        pieces.append("`")
        position = end + 2


def _check_bare_part(text: str, part: str, what: str) -> None:
    odd = sorted({c for c in part if c in _QUOTE_ONLY_CHARS or c.isspace()})
    odd += [marker for marker in ("--", "/*") if marker in part]
    if odd:
        shown = ", ".join(repr(c) if not c.isspace() else "whitespace" for c in dict.fromkeys(odd))
        raise InvalidSpecError(
            f"{what} identifier {text!r} has an invalid part {part!r}: {shown} may only appear in a "
            "part written in backticks, e.g. db.`my part` (a backtick inside is doubled)"
        )


def quote_name(name: str) -> str:
    """One name in backticks, an inner backtick doubled: Spark's rule, so nothing in it is SQL."""
    return "`" + name.replace("`", "``") + "`"


def quote_identifier(identifier: str | Sequence[str]) -> str:
    """Every part of ``identifier`` (a dotted text, or its parts) quoted: ```cat`.`sales-eu`.`Orders```.

    Quoting a quoted identifier gives it back unchanged, so the job can quote wherever a name
    reaches SQL or a Spark API that parses identifiers (``spark.table``, ``writeTo``, ...).
    """
    parts = split_identifier(identifier) if isinstance(identifier, str) else tuple(identifier)
    return ".".join(quote_name(part) for part in parts)


def validate_table_identifier(identifier: str, what: str = "table") -> str:
    """Check a ``[catalog.]namespace[.namespace...].table`` identifier and return it unchanged.

    See :func:`split_identifier` for what a part may hold. The job never splices the text as
    written into SQL: it quotes every part (:func:`quote_identifier`).
    """
    parts = split_identifier(identifier, what)
    if len(parts) < 2:
        raise InvalidSpecError(
            f"{what} identifier {identifier!r} needs at least a namespace and a table name, "
            "for example 'db.orders' or 'my_catalog.db.orders'"
        )
    return identifier


def parse_column(text: str, what: str = "column") -> str:
    """The column name ``text`` stands for: one part, bare or in backticks (see :func:`split_identifier`).

    Nested fields are not addressed: ``a.b`` is refused (write ```a.b``` for a column whose name
    holds a dot).
    """
    parts = split_identifier(text, what)
    if len(parts) != 1:
        raise InvalidSpecError(
            f"{what} identifier {text!r} has an invalid part: a column name is one part; write a name "
            f"holding a dot in backticks, e.g. {quote_name(text)}"
        )
    return parts[0]


def quote_column(text: str, what: str = "column") -> str:
    """The column ``text`` names, quoted for SQL and for ``F.col``: ``order-date`` -> ```order-date```."""
    return quote_name(parse_column(text, what))
