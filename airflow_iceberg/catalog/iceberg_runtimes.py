"""Which Iceberg releases publish an ``iceberg-spark-runtime`` for which Spark line, and each line's default.

A connection names its Spark line (``spark_version``) and may name an Iceberg release
(``iceberg_version``); the runtime is ``org.apache.iceberg:iceberg-spark-runtime-<line>_<scala>:<release>``.
Iceberg builds each Spark line for a span of releases only, so a pairing outside that span names an
artifact that does not exist, and spark-submit would fail only once it resolves ``--packages``.
:func:`pairing_problem` says so when the connection is read instead.

Sources, per Spark line: the first and last Iceberg release with a runtime for it, from Iceberg's
support table (``site/docs/multi-engine-support.md``, "Initial / Latest Iceberg Support") and each
release's ``dev/stage-binaries.sh`` (the Spark lines it publishes). 1.12.0 is newer than the Iceberg
source this was read from, so its lines come from Maven Central: the mirror this was built against
serves ``iceberg-spark-runtime-3.5_2.12`` and ``-4.1_2.13`` at 1.12.0 but no ``-4.0_2.13``. That
mirror also lacks runtimes Iceberg did publish (``3.5_2.13:1.10.2``, ``3.4_2.13:1.11.0``), and
Iceberg's source before 1.12 still builds Spark 4.0, so 4.0 is not refused with 1.12.0 (only
what is known never to exist is); its default stays 1.11.0, the newest 4.0 runtime served. Before 0.13
Spark 3.0 and 3.1 shared the differently named ``iceberg-spark3-runtime``, so their span starts there.
Releases after :data:`NEWEST_KNOWN_RELEASE` are not checked: their lines are not known yet.
"""

from __future__ import annotations

import re

#: The newest Iceberg release this table knows; a later one is accepted for any Spark line.
NEWEST_KNOWN_RELEASE = (1, 12)
#: Spark line -> the first Iceberg release (major, minor) with a runtime for it, and the last one,
#: or None while the newest known release still publishes it.
RUNTIME_RELEASES: dict[str, tuple[tuple[int, int], tuple[int, int] | None]] = {
    "3.0": ((0, 13), (1, 0)),
    "3.1": ((0, 13), (1, 3)),
    "3.2": ((0, 13), (1, 4)),
    "3.3": ((0, 14), (1, 8)),
    "3.4": ((1, 3), (1, 11)),
    "3.5": ((1, 4), None),
    "4.0": ((1, 10), None),  # not known to end: see above
    "4.1": ((1, 11), None),
}
#: The runtime a connection without ``iceberg_version`` gets: the newest release built for its line.
DEFAULT_ICEBERG_VERSIONS = {
    "3.0": "1.0.0",
    "3.1": "1.3.1",
    "3.2": "1.4.3",
    "3.3": "1.8.1",
    "3.4": "1.11.0",
    "3.5": "1.12.0",
    "4.0": "1.11.0",
    "4.1": "1.12.0",
}
#: The lines this provider is tested on, for the connection form's help text.
TESTED_SPARK_LINES = ("3.5", "4.0", "4.1")
#: The standard file name of a runtime jar, which says the release it holds.
_RUNTIME_JAR_RE = re.compile(
    r"iceberg-spark-runtime-(?P<line>[0-9]+\.[0-9]+)_[0-9.]+-(?P<version>[0-9][^/]*?)\.jar\Z"
)


def release(version: str) -> tuple[int, ...]:
    """The leading numbers of a version: ``4.0.1`` -> (4, 0, 1), ``1.11.0-rc1`` -> (1, 11, 0)."""
    numbers = re.match(r"[0-9]+(\.[0-9]+)*", str(version))
    return tuple(int(part) for part in numbers.group(0).split(".")) if numbers else ()


def spark_line(spark_version: str) -> str:
    """``4.0.1`` -> ``4.0``: the part of a Spark version that picks its runtime."""
    return ".".join(str(part) for part in release(spark_version)[:2])


def default_iceberg_version(spark_version: str) -> str | None:
    """The newest Iceberg release with a runtime for this Spark line, or None for a line not known."""
    return DEFAULT_ICEBERG_VERSIONS.get(spark_line(spark_version))


def pairing_problem(spark_version: str, iceberg_version: str) -> str | None:
    """Why no ``iceberg-spark-runtime`` of this Iceberg release exists for this Spark line, or None.

    The message names both fields as the connection form labels them.
    """
    line, iceberg = spark_line(spark_version), release(iceberg_version)[:2]
    newest = ".".join(map(str, NEWEST_KNOWN_RELEASE))
    span = RUNTIME_RELEASES.get(line)
    if iceberg > NEWEST_KNOWN_RELEASE and (span is None or span[1] is None):
        return None  # a release newer than this table: which lines it adds is not known here
    if span is None:
        known = ", ".join(RUNTIME_RELEASES)
        return (
            f"Iceberg {iceberg_version} has no runtime for Spark {line} (Spark version): no Iceberg "
            f"release up to {newest} built an iceberg-spark-runtime-{line}_<scala> (they cover Spark "
            f"{known}); set Spark version to your "
            "cluster's line, or Runtime jar to the jar built for it"
        )
    first, last = span
    if first <= iceberg and (last is None or iceberg <= last):
        return None
    built = f"{_text(first)}.0 to {_text(last)}.x" if last else f"{_text(first)}.0 on"
    return (
        f"Iceberg {iceberg_version} has no runtime for Spark {line} (Spark version): Iceberg builds "
        f"Spark {line} runtimes from {built}; set Iceberg version to one of those, or leave it empty "
        f"for the newest, {DEFAULT_ICEBERG_VERSIONS[line]}"
    )


def jar_iceberg_version(runtime_jar: str) -> str | None:
    """The release a runtime jar holds, from its standard name (``…-3.5_2.12-1.12.0.jar``), else None."""
    found = _RUNTIME_JAR_RE.search(runtime_jar.rsplit("/", 1)[-1])
    return found.group("version") if found else None


def jar_spark_line(runtime_jar: str) -> str | None:
    """The Spark line a runtime jar is built for, from its standard name (``…-3.5_2.12-…``: 3.5), or None."""
    found = _RUNTIME_JAR_RE.search(runtime_jar.rsplit("/", 1)[-1])
    return found.group("line") if found else None


def jar_line_problem(spark_version: str, runtime_jar: str) -> str | None:
    """Why a runtime jar named for another Spark line cannot run on this one, or None.

    Each line's runtime is compiled against that line's internal APIs: a 3.5 jar on Spark 4.0
    fails only once the first Iceberg class loads, inside the Spark application.
    """
    built_for, line = jar_spark_line(runtime_jar), spark_line(spark_version)
    if built_for is None or built_for == line:
        return None
    name = runtime_jar.rsplit("/", 1)[-1]
    return (
        f"{name} is built for Spark {built_for}, and Spark version is {line}: give the jar built for "
        f"Spark {line} (iceberg-spark-runtime-{line}_<scala>-<release>.jar), or set Spark version to "
        f"{built_for} if that is the cluster's line"
    )


def pinned_runtime_note(spark_version: str, iceberg_version: str) -> str | None:
    """What the Test button adds when ``iceberg_version`` holds another release than the line's default.

    A connection saved with the form while Iceberg version was required stores that field's old
    default (1.10.2), which still wins: nothing else on the form says that clearing it upgrades.
    """
    default = default_iceberg_version(spark_version)
    if default is None or iceberg_version == default:
        return None
    return (
        f"runtime: Iceberg {iceberg_version}, as Iceberg version says (leave it empty for "
        f"Spark {spark_line(spark_version)}'s newest, {default})"
    )


def defaults_text() -> str:
    """The default of each tested line, for help texts: ``3.5: 1.12.0, 4.0: 1.11.0, 4.1: 1.12.0``."""
    return ", ".join(f"{line}: {DEFAULT_ICEBERG_VERSIONS[line]}" for line in TESTED_SPARK_LINES)


def _text(version: tuple[int, ...] | None) -> str:
    return ".".join(map(str, version or ()))
