"""The PySpark side of airflow-iceberg: the application spark-submit runs, and what it imports.

Nothing in this package may import Airflow: it runs on the Spark driver, where only pyspark is
installed. The operators submit :data:`ICEBERG_JOB_PATH` as the application and ship the whole
package beside it as a zip (:func:`write_job_archive`, passed with ``--py-files``), which
spark-submit puts on the driver's ``sys.path`` in every deploy mode, uploading it to the cluster
when the driver runs there.
"""

from __future__ import annotations

import zipfile
from pathlib import Path

#: The application file the operators submit.
ICEBERG_JOB_PATH = Path(__file__).with_name("iceberg_job.py")
#: File name of the archive :func:`write_job_archive` writes.
JOB_ARCHIVE_NAME = "airflow_iceberg_jobs.zip"

_PACKAGE_DIR = Path(__file__).parent
# The archive's airflow_iceberg/__init__.py: the real one belongs to the Airflow side.
_TOP_LEVEL_INIT = '"""airflow-iceberg\'s job package, as shipped to the Spark driver."""\n'
# A fixed timestamp keeps the archive's bytes the same for the same sources.
_ZIP_DATE = (1980, 1, 1, 0, 0, 0)


def job_modules() -> list[Path]:
    """The package's Python files, its subpackages' (``spec/``) included, in a stable order."""
    return sorted(_PACKAGE_DIR.rglob("*.py"))


def write_job_archive(directory: str | Path) -> Path:
    """Write the job package as a zip in ``directory`` and return its path.

    The zip holds ``airflow_iceberg/__init__.py`` (a stub) and ``airflow_iceberg/jobs/**/*.py``, so
    the job imports its modules the same way on the driver as in this source tree. It is written
    per task into the operator's private temporary folder rather than cached in a shared place,
    so no other local user can swap the code the driver runs.
    """
    path = Path(directory) / JOB_ARCHIVE_NAME
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        _add(archive, "airflow_iceberg/__init__.py", _TOP_LEVEL_INIT.encode())
        for module in job_modules():
            name = module.relative_to(_PACKAGE_DIR).as_posix()
            _add(archive, f"airflow_iceberg/jobs/{name}", module.read_bytes())
    return path


def _add(archive: zipfile.ZipFile, name: str, data: bytes) -> None:
    info = zipfile.ZipInfo(name, date_time=_ZIP_DATE)
    info.compress_type = zipfile.ZIP_DEFLATED
    info.external_attr = 0o644 << 16
    archive.writestr(info, data)
