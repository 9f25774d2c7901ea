"""The zip the operators ship with ``--py-files`` is enough for the driver to run the job.

The driver has pyspark but not airflow-iceberg, so every module the application imports must be
inside the archive. A fresh interpreter with only the archive added (``-I``: no PYTHONPATH, no
current directory, so not this source tree) must import the application from it.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from airflow_iceberg.jobs import write_job_archive

PROBE = """
import sys
sys.path.insert(0, sys.argv[1])
import airflow_iceberg
import airflow_iceberg.jobs.iceberg_job as job
loaded = [m.__file__ for name, m in sorted(sys.modules.items()) if name.startswith("airflow_iceberg")]
print("\\n".join(loaded))
"""


def test_the_application_imports_from_the_archive_alone(tmp_path: Path) -> None:
    archive = write_job_archive(tmp_path)
    run = subprocess.run(
        [sys.executable, "-I", "-c", PROBE, str(archive)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert run.returncode == 0, run.stderr
    loaded = run.stdout.split()
    assert len(loaded) >= 10, loaded  # the package, jobs, the application and its modules
    assert all(path.startswith(str(archive) + "/") for path in loaded), loaded
