"""Where a YARN application's staging directory is, who owns it, and how FsShell is asked to delete it.

The deletion itself runs Hadoop's real FsShell in ``tests/unit/test_cluster_mode.py`` (local file
system) and ``tests/integration/test_cluster_mode_on_yarn.py`` (a real YARN cluster).
"""

from __future__ import annotations

import logging
import os
import stat
import time

import pytest

from airflow_iceberg.operators.yarn_staging import (
    hadoop_options,
    hadoop_user,
    remove_staging_dir,
    spark_class,
    staging_dir,
)


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


def _executable(path, text: str = "#!/bin/sh\nexit 0\n"):
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


def test_a_deletion_that_fails_is_reported_with_the_command_that_would_do_it(tmp_path, caplog):
    """Never raised: the task's own error is the one to report; the log says what is left where."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    _executable(bin_dir / "spark-submit")
    _executable(bin_dir / "spark-class", "#!/bin/sh\necho 'rm: Permission denied: user=etl' >&2\nexit 1\n")
    with caplog.at_level(logging.WARNING):
        done = remove_staging_dir(
            "application_1_0001", staging_root="hdfs://nn/tmp/staging", spark_binary="spark-submit",
            env={"PATH": str(bin_dir)}, conf={}, proxy_user="analyst", principal=None,
            log=logging.getLogger("test"), wait_seconds=30,
        )
    assert done is False
    assert "hdfs dfs -rm -r -f hdfs://nn/tmp/staging/analyst/.sparkStaging/application_1_0001" in caplog.text
    assert "Permission denied" in caplog.text


def test_the_deletion_runs_as_the_proxy_user_without_the_trash(tmp_path):
    """The trash would keep the secrets file; a proxy user's directory is that user's to delete."""
    bin_dir, seen = tmp_path / "bin", tmp_path / "seen"
    bin_dir.mkdir()
    _executable(bin_dir / "spark-submit")
    _executable(bin_dir / "spark-class", f'#!/bin/sh\necho "$HADOOP_PROXY_USER $@" > {seen}\n')
    done = remove_staging_dir(
        "application_1_0001", staging_root=None, spark_binary="spark-submit",
        env={"PATH": str(bin_dir)}, conf={"spark.hadoop.fs.defaultFS": "hdfs://nn"}, proxy_user="analyst",
        principal=None, log=logging.getLogger("test"), wait_seconds=30,
    )
    assert done is True
    assert seen.read_text().split() == [
        "analyst", "org.apache.hadoop.fs.FsShell", "-D", "fs.defaultFS=hdfs://nn",
        "-rm", "-r", "-f", "-skipTrash", ".sparkStaging/application_1_0001",
    ]


def test_a_slow_deletion_goes_on_in_its_own_session(tmp_path):
    """``on_kill`` waits a few seconds; Airflow's SIGKILL of the task must not stop the deletion."""
    bin_dir, seen = tmp_path / "bin", tmp_path / "seen"
    bin_dir.mkdir()
    _executable(bin_dir / "spark-submit")
    _executable(bin_dir / "spark-class", f"#!/bin/sh\nsleep 1\nps -o sid= -p $$ > {seen}\n")
    done = remove_staging_dir(
        "application_1_0001", staging_root=None, spark_binary="spark-submit",
        env={"PATH": f"{bin_dir}:/usr/bin:/bin"}, conf={}, proxy_user=None, principal=None,
        log=logging.getLogger("test"), wait_seconds=0.1,
    )
    assert done is None  # not known yet: still running
    deadline = time.monotonic() + 30
    while not (seen.exists() and seen.read_text().strip()) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert int(seen.read_text()) != os.getsid(0)
