"""Where a YARN application's staging directory is, who owns it, how FsShell is asked to delete it,
and when it may be.

The deletion itself runs Hadoop's real FsShell here (local file system), in
``tests/unit/test_cluster_mode.py`` and on a real YARN cluster in
``tests/integration/test_cluster_mode_on_yarn.py``.
"""

from __future__ import annotations

import logging
import os
import stat
import time
from pathlib import Path

import pytest

from airflow_iceberg.operators.yarn_staging import (
    NOT_FOUND,
    StagingDeletion,
    escape_glob,
    hadoop_options,
    hadoop_user,
    spark_class,
    staging_dir,
    watch,
    will_not_run_again,
)

LOG = logging.getLogger("test")


def test_the_staging_dir_is_sparks_own_layout():
    assert (
        staging_dir("application_1_0001", "hdfs://nn:8020/tmp/staging/", "etl")
        == "hdfs://nn:8020/tmp/staging/etl/.sparkStaging/application_1_0001"
    )
    # without spark.yarn.stagingDir: relative, so the default file system's home directory
    assert staging_dir("application_1_0001", None, "etl") == ".sparkStaging/application_1_0001"


@pytest.mark.parametrize(
    ("proxy_user", "principal", "env", "user"),
    [
        ("analyst", "airflow/worker-1@EXAMPLE.COM", {"HADOOP_USER_NAME": "x"}, "analyst"),
        (None, "airflow/worker-1@EXAMPLE.COM", {"HADOOP_USER_NAME": "x"}, "airflow"),
        (None, "etl@EXAMPLE.COM", {}, "etl"),
        (None, None, {"HADOOP_USER_NAME": "hadoop"}, "hadoop"),
    ],
)
def test_the_user_is_the_one_spark_submit_ran_as(proxy_user, principal, env, user):
    assert hadoop_user(proxy_user, principal, env) == user


def test_hadoop_settings_reach_fsshell_but_secrets_stay_off_argv():
    options = hadoop_options(
        {
            "spark.hadoop.fs.defaultFS": "hdfs://nn:8020",
            "spark.hadoop.fs.s3a.secret.key": "SENTINEL-s3-key",
            "spark.executor.memory": "2g",
        }
    )
    assert options == ["-D", "fs.defaultFS=hdfs://nn:8020"]


@pytest.mark.parametrize(
    ("state", "submitter_exited", "ended"),
    [
        ("KILLED", False, True),
        ("FAILED", False, True),
        ("FINISHED", False, True),
        ("RUNNING", True, False),  # a new attempt would need the files
        ("ACCEPTED", True, False),
        (NOT_FOUND, False, False),  # spark-submit may still submit it
        (NOT_FOUND, True, True),  # never submitted, or ended and forgotten
    ],
)
def test_only_an_application_that_will_not_run_again_loses_its_files(state, submitter_exited, ended):
    assert will_not_run_again(state, submitter_exited) is ended


def _executable(path: Path, text: str = "#!/bin/sh\nexit 0\n") -> Path:
    path.write_text(text)
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


def test_spark_class_is_the_one_beside_the_tasks_spark_submit(tmp_path):
    bin_dir = tmp_path / "spark" / "bin"
    bin_dir.mkdir(parents=True)
    _executable(bin_dir / "spark-submit")
    shell = _executable(bin_dir / "spark-class")
    assert spark_class("spark-submit", {"PATH": str(bin_dir)}) == str(shell)
    from_home = {"PATH": str(tmp_path), "SPARK_HOME": str(tmp_path / "spark")}
    assert spark_class("spark-submit", from_home) == str(shell)
    assert spark_class("spark-submit", {"PATH": str(tmp_path)}) is None


def _plan(tmp_path: Path, root: str | None, env: dict | None = None, **kwargs) -> StagingDeletion:
    return StagingDeletion.plan(
        "application_1_0001",
        staging_root=root,
        spark_binary="spark-submit",
        env=env or dict(os.environ),
        hadoop_settings=kwargs.pop("hadoop_settings", {}),
        proxy_user=kwargs.pop("proxy_user", None),
        principal=kwargs.pop("principal", "etl"),
    )


@pytest.mark.parametrize("root_name", ["staging[prod]", "st?ging"])
def test_glob_characters_in_the_staging_root_delete_exactly_that_directory(tmp_path, root_name):
    """Spark stages literally; FsShell expands globs. Escaped, the deletion misses nothing and
    reaches no other root (``st?ging`` would match ``staging``)."""
    ours = tmp_path / root_name / "etl" / ".sparkStaging" / "application_1_0001"
    other = tmp_path / "staging" / "etl" / ".sparkStaging" / "application_1_0001"
    for folder in (ours, other):
        folder.mkdir(parents=True)
        (folder / "7").write_text("SENTINEL")
    deletion = _plan(tmp_path, f"file://{tmp_path / root_name}")  # as a user writes it: literally
    assert deletion.run(LOG, wait_seconds=120) == "deleted"
    assert not ours.exists() and (other / "7").exists()


def test_a_directory_that_is_not_there_is_reported_so_not_as_deleted(tmp_path, caplog):
    deletion = _plan(tmp_path, (tmp_path / "staging").as_uri())
    with caplog.at_level(logging.INFO):
        assert deletion.run(LOG, wait_seconds=120) == "absent"
    assert "Deleted" not in caplog.text and "is not there" in caplog.text


def test_escape_glob_leaves_plain_paths_alone():
    assert escape_glob("hdfs://nn:8020/tmp/staging/etl/.sparkStaging/application_1_2") == (
        "hdfs://nn:8020/tmp/staging/etl/.sparkStaging/application_1_2"
    )
    assert escape_glob("/a[b]/c?d{e}*\\") == "/a\\[b\\]/c\\?d\\{e\\}\\*\\\\"


def test_a_deletion_that_fails_is_reported_with_the_command_that_would_do_it(tmp_path, caplog):
    """Never raised: the task's own error is the one to report; the log says what is left where."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    _executable(bin_dir / "spark-submit")
    _executable(bin_dir / "spark-class", "#!/bin/sh\necho 'rm: Permission denied: user=etl' >&2\nexit 1\n")
    deletion = _plan(tmp_path, "hdfs://nn/tmp/staging", {"PATH": str(bin_dir)}, proxy_user="analyst")
    with caplog.at_level(logging.WARNING):
        assert deletion.run(LOG, wait_seconds=30) == "failed"
    path = "hdfs://nn/tmp/staging/analyst/.sparkStaging/application_1_0001"
    assert f"hdfs dfs -rm -r -skipTrash {path}" in caplog.text
    assert "Permission denied" in caplog.text


def test_the_deletion_runs_as_the_proxy_user_without_the_trash(tmp_path):
    """The trash would keep the secrets file; a proxy user's directory is that user's to delete."""
    bin_dir, seen = tmp_path / "bin", tmp_path / "seen"
    bin_dir.mkdir()
    _executable(bin_dir / "spark-submit")
    _executable(bin_dir / "spark-class", f'#!/bin/sh\necho "$HADOOP_PROXY_USER $@" > {seen}\n')
    deletion = _plan(
        tmp_path, None, {"PATH": str(bin_dir)}, proxy_user="analyst",
        hadoop_settings={"spark.hadoop.fs.defaultFS": "hdfs://nn"},
    )
    assert deletion.run(LOG, wait_seconds=30) == "deleted"
    assert seen.read_text().split() == [
        "analyst", "org.apache.hadoop.fs.FsShell", "-D", "fs.defaultFS=hdfs://nn",
        "-rm", "-r", "-skipTrash", ".sparkStaging/application_1_0001",
    ]


def test_a_slow_deletion_goes_on_in_its_own_session(tmp_path):
    """Airflow's SIGKILL of the task must not stop the deletion."""
    bin_dir, seen = tmp_path / "bin", tmp_path / "seen"
    bin_dir.mkdir()
    _executable(bin_dir / "spark-submit")
    _executable(bin_dir / "spark-class", f"#!/bin/sh\nsleep 1\nps -o sid= -p $$ > {seen}\n")
    deletion = _plan(tmp_path, None, {"PATH": f"{bin_dir}:/usr/bin:/bin"})
    assert deletion.run(LOG, wait_seconds=0.1) == "pending"  # not known yet: still running
    deadline = time.monotonic() + 30
    while not (seen.exists() and seen.read_text().strip()) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert int(seen.read_text()) != os.getsid(0)


class _States:
    """A ResourceManager whose answers are a script: one state per question, the last one repeated."""

    def __init__(self, *answers: str | None) -> None:
        self.answers, self.asked = list(answers), 0

    def state(self, application_id: str) -> str:
        answer = self.answers[min(self.asked, len(self.answers) - 1)]
        self.asked += 1
        if answer is None:
            raise RuntimeError("the ResourceManager did not answer")
        return answer


def test_the_watcher_deletes_only_once_the_application_ended(tmp_path):
    folder = tmp_path / "staging" / "etl" / ".sparkStaging" / "application_1_0001"
    folder.mkdir(parents=True)
    deletion = _plan(tmp_path, (tmp_path / "staging").as_uri())
    rm = _States("RUNNING", None, "RUNNING", "KILLED")
    checks = []

    def sleep(seconds):
        checks.append(folder.exists())

    assert watch(deletion, rm, LOG, seconds=60, sleep=sleep) == "deleted"
    assert checks == [True, True, True] and not folder.exists()


def test_the_watcher_keeps_a_directory_whose_application_never_ends(tmp_path):
    folder = tmp_path / "staging" / "etl" / ".sparkStaging" / "application_1_0001"
    folder.mkdir(parents=True)
    deletion = _plan(tmp_path, (tmp_path / "staging").as_uri())
    assert watch(deletion, _States("RUNNING"), LOG, seconds=0.5, sleep=lambda s: time.sleep(0.05)) == "kept"
    assert folder.exists()
