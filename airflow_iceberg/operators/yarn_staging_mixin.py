"""The YARN staging directory of a task's application: deleted once the application will not run again.

A YARN application in cluster mode gets the catalog secrets file through ``--files``, which Spark
uploads to ``.sparkStaging/<application id>/`` and deletes only when the application ends by
itself. This mixin decides *when* the operator deletes it (after ``on_kill``, on failure, and on
the next try for an application an earlier try left); :mod:`.yarn_staging` does the deleting and
the asking. It keeps that out of :class:`~.base.IcebergSparkSubmitOperator`, whose ``on_kill``,
failure path and ``execute`` call it.

The operator supplies ``_submit_environment``, ``_submit_properties``, ``_submit_property``,
``_get_hook``, ``external_id_key``, ``properties_file``, ``conf`` and ``log``, and sets
``_secrets_shipped_to_yarn`` when it ships the file.
"""

from __future__ import annotations

from functools import cached_property
from typing import TYPE_CHECKING

from airflow_iceberg.operators.yarn_staging import (
    STAGING_DIR_KEY,
    ResourceManager,
    StagingDeletion,
    watch,
    watch_then_delete,
    will_not_run_again,
)

if TYPE_CHECKING:
    from airflow.providers.apache.spark.hooks.spark_submit import SparkSubmitHook
    from airflow.providers.common.compat.sdk import Context

#: How long a failed task waits for its YARN application's staging directory to be deleted.
STAGING_WAIT_SECONDS = 120
#: How long ``on_kill`` watches the application itself when no watcher process can (Airflow sends
#: SIGKILL five seconds after SIGTERM).
KILL_WAIT_SECONDS = 4


class YarnStagingMixin:
    """When a task deletes its YARN application's staging directory (the secrets file in it)."""

    def _ships_secrets_to(self, hook: SparkSubmitHook) -> bool:
        """Whether this task's YARN application got the catalog secrets file (``--files``)."""
        return hook._is_yarn_cluster_mode and getattr(self, "_secrets_shipped_to_yarn", False)

    def _delete_an_earlier_tries_staging(self, context: Context) -> None:
        """Delete the staging directory of the YARN application an earlier try left, once it ended.

        The worker that ran it may have died before its ``on_kill`` could (a SIGKILL, a lost node),
        and the application was killed after that (``yarn application -kill``, a ResourceManager
        restart). The provider is about to submit again; its stored application id is the only
        trace of the old one. That try's spark-submit is gone, so an application the
        ResourceManager does not know will never run.
        """
        store = context.get("task_state_store")
        if store is None or not getattr(self, "_secrets_shipped_to_yarn", False):
            return
        if application_id := store.get(self.external_id_key):
            self._delete_yarn_staging(self._get_hook(), str(application_id))  # YARN cluster mode only

    def _delete_yarn_staging(self, hook: SparkSubmitHook, application_id: str | None) -> None:
        """Delete an application's staging directory now, if the ResourceManager says it will not run again.

        For the failure path and the next try, where spark-submit has exited: one that ended, or
        that the ResourceManager does not know, is deleted; one still running is kept (its next
        attempt needs the files, and a retry reconnects to it).
        """
        if not (application_id and self._ships_secrets_to(hook)) or application_id in self._staging_deleted:
            return
        try:
            state = self._resource_manager(hook).state(application_id)
        except (RuntimeError, ValueError) as error:
            self.log.warning("Could not ask YARN whether %s ended (%s): its staging directory is kept "
                             "for the next try to delete", application_id, error)
            return
        if not will_not_run_again(state, submitter_exited=True):
            return
        self._staging_deleted.add(application_id)
        self._staging_deletion(hook, application_id).run(self.log, wait_seconds=STAGING_WAIT_SECONDS)

    def _watch_then_delete_staging(self, hook: SparkSubmitHook, application_id: str) -> None:
        """After ``on_kill``: a watcher deletes the staging directory once the application has ended."""
        self._staging_deleted.add(application_id)
        deletion = self._staging_deletion(hook, application_id)
        try:
            resource_manager = self._resource_manager(hook)
        except (RuntimeError, ValueError) as error:
            self.log.warning("Cannot watch %s for its end (%s): its staging directory is kept for the "
                             "next try to delete", application_id, error)
            return
        pid = watch_then_delete(deletion, resource_manager, self.log)
        if pid is not None:
            self.log.info("Deleting %s's staging directory once YARN reports the application ended "
                          "(watcher pid %s)", application_id, pid)
            return
        # The auth object cannot travel to a watcher: watch here for as long as Airflow lets us.
        watch(deletion, resource_manager, self.log, seconds=KILL_WAIT_SECONDS)

    def _resource_manager(self, hook: SparkSubmitHook) -> ResourceManager:
        """The ResourceManager the provider polls (its web address and auth, from the Spark connection)."""
        return ResourceManager(hook._get_yarn_rm_base_url(), hook._resolved_yarn_rm_auth)

    def _staging_deletion(self, hook: SparkSubmitHook, application_id: str) -> StagingDeletion:
        """How FsShell deletes the application's staging directory, as the user spark-submit ran as."""
        env = self._submit_environment()
        connection = hook._connection
        principal, keytab = connection.get("principal"), connection.get("keytab")
        if principal and keytab:  # as the provider's own `yarn application -kill` does
            from airflow.providers.common.compat.sdk import conf as airflow_conf
            from airflow.security.kerberos import renew_from_kt

            renew_from_kt(principal, keytab, exit_on_fail=False)
            env["KRB5CCNAME"] = airflow_conf.get_mandatory_value("kerberos", "ccache")
        return StagingDeletion.plan(
            application_id,
            staging_root=self._submit_property(STAGING_DIR_KEY),
            spark_binary=str(connection.get("spark_binary") or "spark-submit"),
            env=env,
            hadoop_settings=self._submit_hadoop_settings(),
            proxy_user=hook._proxy_user,
            principal=principal,
        )

    def _submit_hadoop_settings(self) -> dict[str, str]:
        """spark-submit's ``spark.hadoop.*`` settings: the properties file's, then ``conf``'s, which win."""
        properties = self._submit_properties()
        return {key: value for key, value in properties.items() if key.startswith("spark.hadoop.")}

    @cached_property
    def _staging_deleted(self) -> set[str]:
        """Applications whose staging directory is being deleted (``on_kill`` runs before the failure)."""
        return set()
