"""What the deployment's own Spark properties file says, read the way spark-submit reads it.

The operators pass ``--conf spark.redaction.regex=...`` to cover every catalog secret. A
``--conf`` wins over the properties file, so a pattern the deployment keeps in
``spark-defaults.conf`` (for secrets of its own there, an S3A encryption key for every job say)
would be replaced and those secrets shown in clear in Spark's UI and event log. So the operators
read the deployment's pattern and merge it into theirs. spark-submit reads ``--properties-file``
when given (the operator's ``properties_file``), else ``spark-defaults.conf`` in
``$SPARK_CONF_DIR``, else in ``$SPARK_HOME/conf``, where an unset ``SPARK_HOME`` is the folder
above the ``spark-submit`` found on ``PATH`` (what Spark's ``find-spark-home`` sets for a
tarball install); the file is a Java properties file.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
from collections.abc import Mapping

DEFAULTS_FILE = "spark-defaults.conf"
#: ``key value``, ``key=value`` or ``key: value`` (``java.util.Properties``).
_KEY_VALUE_RE = re.compile(r"((?:\\.|[^\s=:\\])+)\s*[=:\s]\s*(.*)", re.DOTALL)
_ESCAPES = {"t": "\t", "n": "\n", "r": "\r", "f": "\f"}


def spark_home(environment: Mapping[str, str], spark_binary: str = "spark-submit") -> str | None:
    """``SPARK_HOME``, or where spark-submit finds its home without it: the folder above its ``bin/``."""
    if environment.get("SPARK_HOME"):
        return environment["SPARK_HOME"]
    found = shutil.which(spark_binary, path=environment.get("PATH"))
    # spark-submit sources the find-spark-home beside the path it was started by ($0)
    return os.path.dirname(os.path.dirname(os.path.abspath(found))) if found else None


def properties_file_path(
    properties_file: str | None, environment: Mapping[str, str], spark_binary: str = "spark-submit"
) -> str | None:
    """The properties file spark-submit loads, or None when it loads none."""
    if properties_file:
        return properties_file
    home = spark_home(environment, spark_binary)
    conf_dir = environment.get("SPARK_CONF_DIR") or (os.path.join(home, "conf") if home else None)
    return os.path.join(conf_dir, DEFAULTS_FILE) if conf_dir else None


def deployment_property(
    key: str, properties_file: str | None, environment: Mapping[str, str], spark_binary: str = "spark-submit"
) -> str | None:
    """The value the deployment's properties file gives ``key``, or None (no file, unreadable, unset)."""
    return deployment_properties(properties_file, environment, spark_binary).get(key)


def deployment_properties(
    properties_file: str | None, environment: Mapping[str, str], spark_binary: str = "spark-submit"
) -> dict[str, str]:
    """Every setting of the deployment's properties file ({} when there is none, or it is unreadable)."""
    path = properties_file_path(properties_file, environment, spark_binary)
    try:
        with open(path or "", encoding="utf-8") as handle:
            text = handle.read()
    except OSError:  # no file: spark-submit loads none either
        return {}
    return read_properties(text)


#: Environment variables whose ``-D<key>=<value>`` become system properties of spark-submit's JVM,
#: which ``SparkConf`` loads (``spark.*`` only) under the ``--conf`` and properties file settings.
#: In the order the JVM applies them (``JAVA_TOOL_OPTIONS`` before the command line, which
#: carries ``SPARK_SUBMIT_OPTS``, and ``_JAVA_OPTIONS`` after it): the last one wins.
JVM_OPTION_VARIABLES = ("JAVA_TOOL_OPTIONS", "SPARK_SUBMIT_OPTS", "_JAVA_OPTIONS")


def jvm_system_property(key: str, environment: Mapping[str, str]) -> str | None:
    """The value a ``-D`` option in spark-submit's JVM options gives ``key``, or None (the last one wins)."""
    found = None
    for variable in JVM_OPTION_VARIABLES:
        try:
            options = shlex.split(environment.get(variable) or "", posix=True)
        except ValueError:  # unbalanced quotes: read it word by word, as a shell would not
            options = (environment.get(variable) or "").split()
        for option in options:
            name, equals, value = option.removeprefix("-D").partition("=")
            if option.startswith("-D") and name == key:
                found = value if equals else ""
    return found


def read_properties(text: str) -> dict[str, str]:
    """Parse a Java properties file: comments, ``\\`` line continuations and escapes."""
    properties: dict[str, str] = {}
    logical = ""
    for raw in text.splitlines():
        line = raw.lstrip()
        if not logical and (not line or line.startswith(("#", "!"))):
            continue
        if _ends_in_escape(line):
            logical += line[:-1]
            continue
        logical += line
        match = _KEY_VALUE_RE.fullmatch(logical.strip())
        if match:
            properties[_unescape(match.group(1))] = _unescape(match.group(2))
        elif logical.strip():
            properties[_unescape(logical.strip())] = ""
        logical = ""
    return properties


def _ends_in_escape(line: str) -> bool:
    """An odd number of trailing backslashes continues the line."""
    return (len(line) - len(line.rstrip("\\"))) % 2 == 1


def _unescape(text: str) -> str:
    """``\\t``, ``\\n``, ``\\r``, ``\\f``, ``\\uXXXX``; any other escaped character stands for itself."""

    def replace(match: re.Match[str]) -> str:
        if match.group(1):
            return chr(int(match.group(1), 16))
        return _ESCAPES.get(match.group(2), match.group(2))

    return re.sub(r"\\(?:u([0-9a-fA-F]{4})|(.))", replace, text, flags=re.DOTALL)
