"""The job archive: what it holds, and that the same sources give the same bytes."""

from __future__ import annotations

import zipfile
from pathlib import Path

from airflow_iceberg.jobs import ICEBERG_JOB_PATH, JOB_ARCHIVE_NAME, write_job_archive

JOBS_DIR = ICEBERG_JOB_PATH.parent


def test_archive_holds_every_job_module_under_its_package_path(tmp_path: Path) -> None:
    archive = write_job_archive(tmp_path)
    assert archive == tmp_path / JOB_ARCHIVE_NAME
    with zipfile.ZipFile(archive) as opened:
        names = opened.namelist()
        shipped_job = opened.read("airflow_iceberg/jobs/iceberg_job.py")
        top_init = opened.read("airflow_iceberg/__init__.py").decode()
    expected = {
        f"airflow_iceberg/jobs/{path.relative_to(JOBS_DIR).as_posix()}" for path in JOBS_DIR.rglob("*.py")
    }
    assert set(names) == {"airflow_iceberg/__init__.py", *expected}
    assert "airflow_iceberg/jobs/spec/request.py" in names and "airflow_iceberg/jobs/writes.py" in names
    assert shipped_job == ICEBERG_JOB_PATH.read_bytes()
    assert "import" not in top_init  # the stub must not pull in the Airflow side of the package


def test_archive_bytes_depend_only_on_the_sources(tmp_path: Path) -> None:
    builds = []
    for name in ("first", "second"):
        (tmp_path / name).mkdir()
        builds.append(write_job_archive(tmp_path / name).read_bytes())
    assert builds[0] == builds[1]
