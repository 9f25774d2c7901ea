"""Delete a YARN application's staging directory once the application has ended without Spark doing it.

In YARN cluster mode the catalog's secrets travel with ``--files`` into the application's
staging directory, ``<spark.yarn.stagingDir>/<user>/.sparkStaging/<application id>`` (or
``.sparkStaging/<application id>`` in the default file system's home directory), which only the
submitting user can read. Spark's ApplicationMaster deletes that directory when the application
ends by itself, or fails on its last attempt. An application that is *killed* never gets to:
YARN gives the ApplicationMaster's shutdown hook 250 ms before SIGKILL, and Spark cleans only on
the last attempt. That is every way Airflow stops a task (``on_kill``: marked failed, cleared or
deleted while running, an ``execution_timeout``), and ``yarn application -kill``. Nor does a
spark-submit that dies while uploading. The secrets file would stay behind.

So the operator deletes the directory itself, with Hadoop's own ``FsShell`` run by the worker's
Spark (``spark-class``, beside ``spark-submit``), given the ``spark.hadoop.*`` settings
spark-submit had, so that it reaches the file system Spark staged on (HDFS, S3A, the local one).

A directory is deleted only once YARN says the application will not run again (a new attempt
would need its files): the ResourceManager reports it ended, or does not know it and the
spark-submit that would have submitted it has exited (it never was, or the ResourceManager has
forgotten it since it ended). After ``on_kill`` that takes a few seconds more than Airflow gives
a stopping task (SIGKILL five seconds after SIGTERM), so ``on_kill`` hands it to a watcher
process in a session of its own (this module's ``main``), which asks the ResourceManager until
the application has ended, then deletes.
"""

from __future__ import annotations

import base64
import json
import os
import pickle
import pwd
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

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
#: What the ResourceManager's REST API answers for an application it does not know.
NOT_FOUND = "NOT_FOUND"
#: YARN application states after which no attempt of it runs again.
ENDED = frozenset({"FINISHED", "FAILED", "KILLED"})
#: Characters Hadoop's path globbing gives a meaning; FsShell expands every path it is given.
_GLOB_CHARACTERS = re.compile(r"([\\*?\[\]{}])")
#: How long the watcher waits for a stopped task's application to end, asking every few seconds.
WATCH_SECONDS = 3600
WATCH_INTERVAL_SECONDS = 3.0
#: How long an application the ResourceManager does not know may still appear (a submission in flight).
NOT_FOUND_GRACE_SECONDS = 15.0


def staging_dir(application_id: str, staging_root: str | None, user: str) -> str:
    """Where spark-submit put the application's files (Spark's ``Client.getAppStagingDir``).

    Without ``spark.yarn.stagingDir`` it is relative: Hadoop resolves it against the default file
    system's working directory, which is the user's home directory there (``/user/<user>`` on
    HDFS; for the local file system FsShell runs in the home directory).
    """
    if staging_root:
        return f"{staging_root.rstrip('/')}/{user}/{SPARK_STAGING}/{application_id}"
    return f"{SPARK_STAGING}/{application_id}"


def escape_glob(path: str) -> str:
    """``path`` as FsShell must be given it to mean exactly that path: Spark stages literally,
    FsShell expands globs (``staging[prod]`` would match nothing, ``st?ging`` another root)."""
    return _GLOB_CHARACTERS.sub(r"\\\1", path)


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


def hadoop_options(settings: Mapping[str, str] | None) -> list[str]:
    """``-D`` options for ``FsShell`` from spark-submit's ``spark.hadoop.*`` settings, secrets left out.

    Spark copies ``spark.hadoop.<key>`` into its Hadoop configuration; ``FsShell`` takes the same as
    ``-D <key>=<value>``. A secret-looking key (an S3 secret key, a token) is not put on argv: a
    staging directory reached only with it stays, and the warning says so.
    """
    options = []
    for key, value in (settings or {}).items():
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


@dataclass
class StagingDeletion:
    """How to delete one application's staging directory: what FsShell runs, where, and as whom."""

    application_id: str
    path: str
    argv: list[str] | None  # None: no spark-class beside spark-submit
    env: dict[str, str] = field(repr=False)
    cwd: str = ""

    @classmethod
    def plan(
        cls,
        application_id: str,
        *,
        staging_root: str | None,
        spark_binary: str,
        env: Mapping[str, str],
        hadoop_settings: Mapping[str, str] | None,
        proxy_user: str | None,
        principal: str | None,
    ) -> StagingDeletion:
        path = staging_dir(application_id, staging_root, hadoop_user(proxy_user, principal, env))
        shell = spark_class(spark_binary, env)
        # -skipTrash: the trash would keep the secrets file. No -f: a path that is not there says so.
        argv = None
        if shell is not None:
            argv = [shell, "org.apache.hadoop.fs.FsShell", *hadoop_options(hadoop_settings)]
            argv += ["-rm", "-r", "-skipTrash", escape_glob(path)]
        run_env = dict(env)
        # spark-class puts SPARK_DIST_CLASSPATH last: the deployment's own core-site.xml wins.
        classpath = [env.get("SPARK_DIST_CLASSPATH"), FALLBACK_HADOOP_CONF]
        run_env["SPARK_DIST_CLASSPATH"] = os.pathsep.join(filter(None, classpath))
        if proxy_user:
            run_env[PROXY_USER_ENV] = proxy_user
        # A local default file system's home directory is its working directory.
        return cls(application_id, path, argv, run_env, cwd=pwd.getpwuid(os.getuid()).pw_dir)

    def run(self, log: Logger, wait_seconds: float) -> str:
        """Delete it now: ``"deleted"``, ``"absent"`` (nothing there), ``"failed"`` or ``"pending"``.

        Waits up to ``wait_seconds``; past that FsShell goes on in its own session (``"pending"``).
        Never raises: this runs on the way out of a failed or stopped task, whose own error is
        the one to report.
        """
        if self.argv is None:
            log.warning(
                "Could not delete YARN application %s's staging directory %s (it holds the catalog "
                "secrets file): no spark-class beside spark-submit. Delete it with: hdfs dfs -rm -r "
                "-skipTrash %s",
                self.application_id, self.path, self.path,
            )
            return "failed"
        try:
            process = subprocess.Popen(
                self.argv, env=self.env, cwd=self.cwd, stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                start_new_session=True,  # outlives the SIGKILL that follows an ignored SIGTERM
            )
            output = process.communicate(timeout=wait_seconds)[0].decode(errors="replace")
        except subprocess.TimeoutExpired:
            log.warning(
                "Still deleting YARN application %s's staging directory %s after %ss; left running",
                self.application_id, self.path, wait_seconds,
            )
            return "pending"
        except OSError as error:
            log.warning("Could not delete YARN application %s's staging directory %s: %s",
                        self.application_id, self.path, error)
            return "failed"
        return self.outcome(process.returncode, output, log)

    def outcome(self, returncode: int, output: str, log: Logger) -> str:
        """Read FsShell's exit code and output, and say in the log what happened."""
        if returncode == 0:
            log.info("Deleted YARN application %s's staging directory %s (secrets file too)",
                     self.application_id, self.path)
            return "deleted"
        if "No such file or directory" in output and output.count("rm: ") == 1:
            log.info("YARN application %s's staging directory %s is not there (Spark deleted it, or "
                     "nothing was uploaded)", self.application_id, self.path)
            return "absent"
        log.warning(
            "Could not delete YARN application %s's staging directory %s (it holds the catalog secrets "
            "file); delete it with: hdfs dfs -rm -r -skipTrash %s\n%s",
            self.application_id, self.path, self.path, output[-2000:],
        )
        return "failed"


@dataclass
class ResourceManager:
    """The ResourceManager's REST API, as the apache-spark provider's polling reaches it."""

    base_url: str
    auth: Any = None  # a requests auth object (the provider's ``yarn_rm_auth``, or Kerberos)
    timeout: float = 30.0

    def state(self, application_id: str) -> str:
        """The application's YARN state, or :data:`NOT_FOUND`; raises ``RuntimeError`` when unreachable."""
        import requests

        url = f"{self.base_url}/ws/v1/cluster/apps/{application_id}"
        try:
            response = requests.get(url, auth=self.auth, timeout=self.timeout)
        except requests.exceptions.RequestException as error:
            raise RuntimeError(f"the ResourceManager did not answer: {error}") from error
        if response.status_code == 404:
            return NOT_FOUND
        if response.status_code != 200:
            raise RuntimeError(f"the ResourceManager answered HTTP {response.status_code}")
        try:
            return str(response.json()["app"]["state"])
        except (ValueError, KeyError, TypeError) as error:
            raise RuntimeError(f"the ResourceManager's answer is not an application: {error}") from error


def will_not_run_again(state: str, submitter_exited: bool) -> bool:
    """Whether an application in YARN ``state`` can never need its staging directory again.

    Ended; or unknown to the ResourceManager once the spark-submit that would submit it has
    exited: it never was submitted, or it ended and the ResourceManager forgot it
    (``yarn.resourcemanager.max-completed-applications``).
    """
    return state in ENDED or (state == NOT_FOUND and submitter_exited)


def watch_then_delete(
    deletion: StagingDeletion, resource_manager: ResourceManager, log: Logger
) -> int | None:
    """Hand the deletion to a watcher process of its own (this module's ``main``): its pid, or None.

    The watcher's instructions (the ResourceManager's auth object included, pickled) go through
    its stdin, never its argv or environment.
    """
    try:
        auth = base64.b64encode(pickle.dumps(resource_manager.auth)).decode()
    except Exception as error:  # an auth object that cannot travel: the caller decides in-process
        log.warning("The ResourceManager's auth object cannot be handed to a watcher: %s", error)
        return None
    orders = {
        "deletion": asdict(deletion),
        "resource_manager": {"base_url": resource_manager.base_url, "auth": auth},
    }
    try:
        watcher = subprocess.Popen(
            [sys.executable, "-m", "airflow_iceberg.operators.yarn_staging"],
            env=deletion.env, cwd=deletion.cwd, stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
        )
        assert watcher.stdin is not None
        watcher.stdin.write(json.dumps(orders).encode())
        watcher.stdin.close()
    except OSError as error:
        log.warning("No watcher for %s's staging directory: %s", deletion.application_id, error)
        return None
    return watcher.pid


def watch(
    deletion: StagingDeletion,
    resource_manager: ResourceManager,
    log: Logger,
    seconds: float = WATCH_SECONDS,
    sleep: Any = time.sleep,
) -> str:
    """Ask the ResourceManager until the application will not run again, then delete; the outcome.

    The task that ran it was stopped, and killed spark-submit if it was still running: an
    application the ResourceManager does not know after :data:`NOT_FOUND_GRACE_SECONDS` (a
    submission in flight when spark-submit was killed) never will.
    """
    started = time.monotonic()
    while time.monotonic() - started < seconds:
        try:
            state = resource_manager.state(deletion.application_id)
        except RuntimeError as error:
            log.info("%s: %s", deletion.application_id, error)
            state = None
        grace_over = time.monotonic() - started >= NOT_FOUND_GRACE_SECONDS
        if state is not None and will_not_run_again(state, submitter_exited=grace_over):
            return deletion.run(log, wait_seconds=600)
        sleep(WATCH_INTERVAL_SECONDS)
    log.warning("%s did not end within %ss: its staging directory %s is kept",
                deletion.application_id, seconds, deletion.path)
    return "kept"


def main(stdin: Any = None) -> int:
    """The watcher process: read its orders from stdin, watch, delete (``python -m`` this module)."""
    import logging

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    orders = json.loads((stdin or sys.stdin).read())
    deletion = StagingDeletion(**orders["deletion"])
    rm = orders["resource_manager"]
    # Pickled by the task that started this process, and passed through its stdin only.
    resource_manager = ResourceManager(rm["base_url"], pickle.loads(base64.b64decode(rm["auth"])))
    outcome = watch(deletion, resource_manager, logging.getLogger("airflow_iceberg.yarn_staging"))
    return 0 if outcome in ("deleted", "absent") else 1


def stop_submitter(process: Any, log: Logger) -> None:
    """Kill spark-submit if it still runs: an application it has yet to submit must never start."""
    if process is not None and process.poll() is None:
        log.info("Stopping spark-submit (pid %s): the task was stopped", process.pid)
        process.kill()


if __name__ == "__main__":
    sys.exit(main())
