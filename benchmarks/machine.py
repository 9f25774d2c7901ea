"""The facts RESULTS.md must state for its numbers to mean anything: machine, load, versions, date."""

from __future__ import annotations

import os
import platform
import subprocess
from datetime import datetime, timezone
from importlib.metadata import version
from pathlib import Path


def memory_gib() -> float:
    with open("/proc/meminfo", encoding="ascii") as meminfo:
        for line in meminfo:
            if line.startswith("MemTotal:"):
                return int(line.split()[1]) / 1024 / 1024
    return float("nan")


def _first_line(argv: list[str]) -> str:
    try:
        completed = subprocess.run(argv, capture_output=True, text=True, timeout=120, check=False)
    except OSError as error:
        return f"unavailable ({error})"
    return ((completed.stdout or completed.stderr).strip().splitlines() or ["unknown"])[0]


def facts() -> dict[str, str]:
    """Machine and version facts, as display strings."""
    spark_python = os.environ.get("PYSPARK_PYTHON", "python3")
    return {
        "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "cpu cores": f"{os.cpu_count()} ({platform.processor() or platform.machine()})",
        "memory": f"{memory_gib():.1f} GiB",
        "os": platform.platform(),
        "python": platform.python_version(),
        "apache-airflow": version("apache-airflow"),
        "apache-airflow-providers-apache-spark": version("apache-airflow-providers-apache-spark"),
        "airflow-iceberg": version("airflow-iceberg"),
        "pyiceberg": version("pyiceberg"),
        "pyspark (Spark runtime)": _first_line(
            [spark_python, "-c", "import pyspark; print(pyspark.__version__)"]
        ),
        "iceberg runtime jar": Path(os.environ.get("ICEBERG_RUNTIME_JAR", "unset")).name,
        "java": _first_line(["java", "-version"]),
    }


def load_average() -> str:
    one, five, fifteen = os.getloadavg()
    return f"{one:.2f} / {five:.2f} / {fifteen:.2f}"


def now() -> str:
    """The UTC time, to the second, as RESULTS.md states dates."""
    return datetime.now(timezone.utc).isoformat(timespec="seconds")
