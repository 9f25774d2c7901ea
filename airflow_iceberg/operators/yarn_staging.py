"""Delete a YARN application's staging directory when the application did not end by itself.

In YARN cluster mode the catalog's secrets travel with ``--files`` into the application's
staging directory, ``<spark.yarn.stagingDir>/<user>/.sparkStaging/<application id>`` (or
``.sparkStaging/<application id>`` in the default file system's home directory), which only the
submitting user can read. Spark's ApplicationMaster deletes that directory when the application
ends by itself, or fails on its last attempt. An application that is *killed* never gets to:
YARN gives the ApplicationMaster's shutdown hook 250 ms before SIGKILL, and Spark cleans only on
the last attempt. That is every way Airflow stops a task: ``on_kill`` when the task is marked
failed, cleared or deleted while running, an ``execution_timeout``, and ``yarn application
-kill``. The secrets file would stay behind.

So the operator deletes the directory itself, with Hadoop's own ``FsShell`` run by the worker's
Spark (``spark-class``, beside ``spark-submit``). It reads the Hadoop configuration spark-submit
read (``HADOOP_CONF_DIR``, ``YARN_CONF_DIR``, ``SPARK_CONF_DIR``), so it reaches whatever file
system the staging directory is on: HDFS, S3A, or the local one. It runs in a session of its
own: Airflow escalates from SIGTERM to SIGKILL five seconds after it asks a task to stop, and the
deletion must outlive that.
"""

from __future__ import annotations

import os
import pwd
import shutil
import subprocess
from collections.abc import Mapping
from typing import TYPE_CHECKING

from airflow_iceberg.catalog.secret_detection import is_secret_property

if TYPE_CHECKING:
    from logging import Logger

#: Spark's setting for the base of every application's staging directory (default: the home dir).
STAGING_DIR_KEY = "spark.yarn.stagingDir"
#: Hadoop reads this to act as another user (Spark's ``--proxy-user``) from a user allowed to.
PROXY_USER_ENV = "HADOOP_PROXY_USER"
#: The folder Spark puts each application's staging directory in.
SPARK_STAGING = ".sparkStaging"
#: An empty ``core-site.xml``, last on FsShell's classpath: FsShell will not start without one.
FALLBACK_HADOOP_CONF = os.path.join(os.path.dirname(__file__), "hadoop_conf")


def staging_dir(application_id: str, staging_root: str | None, user: str) -> str:
    """Where spark-submit put the application's files (Spark's ``Client.getAppStagingDir``).

    Without ``spark.yarn.stagingDir`` it is relative: Hadoop resolves it against the default file
    system's working directory, which is the user's home directory there (``/user/<user>`` on
    HDFS; for the local file system the deletion runs in the home directory, see
    :func:`remove_staging_dir`).
    """
    if staging_root:
        return f"{staging_root.rstrip('/')}/{user}/{SPARK_STAGING}/{application_id}"
    return f"{SPARK_STAGING}/{application_id}"


def hadoop_user(proxy_user: str | None, principal: str | None, env: Mapping[str, str]) -> str:
    """The short user name spark-submit's Hadoop client ran as (``UserGroupInformation``).

    The proxy user when there is one, else the Kerberos principal's first component, else
    ``HADOOP_USER_NAME`` (simple authentication), else the worker's operating system user.
    """
    if proxy_user:
        return proxy_user
    if principal:
        return principal.split("/", 1)[0].split("@", 1)[0]
    return env.get("HADOOP_USER_NAME") or pwd.getpwuid(os.getuid()).pw_name


def hadoop_options(conf: Mapping[str, str] | None) -> list[str]:
    """``-D`` options for ``FsShell`` from the task's ``spark.hadoop.*`` settings, secrets left out.

    Spark copies ``spark.hadoop.<key>`` into its Hadoop configuration; ``FsShell`` takes the same as
    ``-D <key>=<value>``. A secret-looking key (an S3 secret key, a token) is not put on argv: a
    staging directory reached only with it stays, and the warning says so.
    """
    options = []
    for key, value in (conf or {}).items():
        if key.startswith("spark.hadoop.") and not is_secret_property(key):
            options += ["-D", f"{key.removeprefix('spark.hadoop.')}={value}"]
    return options


def spark_class(spark_binary: str, env: Mapping[str, str]) -> str | None:
    """``spark-class`` of the Spark whose ``spark-submit`` the task ran, or None when there is none."""
    submit = shutil.which(spark_binary, path=env.get("PATH"))
    candidates = [os.path.join(os.path.dirname(submit), "spark-class")] if submit else []
    if spark_home := env.get("SPARK_HOME"):
        candidates.append(os.path.join(spark_home, "bin", "spark-class"))
    return next((path for path in candidates if os.access(path, os.X_OK)), None)


def remove_staging_dir(
    application_id: str,
    *,
    staging_root: str | None,
    spark_binary: str,
    env: Mapping[str, str],
    conf: Mapping[str, str] | None,
    proxy_user: str | None,
    principal: str | None,
    log: Logger,
    wait_seconds: float,
) -> bool | None:
    """Delete the application's staging directory; True when done, False when it failed, None when unknown.

    Waits up to ``wait_seconds`` for ``FsShell``; past that the deletion goes on in its own
    session and this returns None. Never raises: this runs on the way out of a failed or killed
    task, whose own error is the one to report.
    """
    path = staging_dir(application_id, staging_root, hadoop_user(proxy_user, principal, env))
    shell = spark_class(spark_binary, env)
    if shell is None:
        log.warning(
            "Could not delete YARN application %s's staging directory %s (it holds the catalog "
            "secrets file): no spark-class beside %s. Delete it with: hdfs dfs -rm -r -f %s",
            application_id, path, spark_binary, path,
        )
        return False
    # -skipTrash: the trash would keep the secrets file.
    argv = [shell, "org.apache.hadoop.fs.FsShell", *hadoop_options(conf), "-rm", "-r", "-f", "-skipTrash"]
    argv.append(path)
    run_env = dict(env)
    # spark-class puts SPARK_DIST_CLASSPATH last: the deployment's own core-site.xml wins.
    classpath = [env.get("SPARK_DIST_CLASSPATH"), FALLBACK_HADOOP_CONF]
    run_env["SPARK_DIST_CLASSPATH"] = os.pathsep.join(filter(None, classpath))
    if proxy_user:
        run_env[PROXY_USER_ENV] = proxy_user
    try:
        process = subprocess.Popen(
            argv,
            env=run_env,
            cwd=pwd.getpwuid(os.getuid()).pw_dir,  # a local default file system's home is its working dir
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # outlives the SIGKILL that follows an ignored SIGTERM
        )
        output, _ = process.communicate(timeout=wait_seconds)
    except subprocess.TimeoutExpired:
        log.warning(
            "Still deleting YARN application %s's staging directory %s after %ss; left running",
            application_id, path, wait_seconds,
        )
        return None
    except OSError as error:
        log.warning(
            "Could not delete YARN application %s's staging directory %s: %s",
            application_id, path, error,
        )
        return False
    if process.returncode != 0:
        log.warning(
            "Could not delete YARN application %s's staging directory %s (it holds the catalog secrets "
            "file); delete it with: hdfs dfs -rm -r -f %s\n%s",
            application_id, path, path, output.decode(errors="replace")[-2000:],
        )
        return False
    log.info("Deleted YARN application %s's staging directory %s (secrets file too)", application_id, path)
    return True
