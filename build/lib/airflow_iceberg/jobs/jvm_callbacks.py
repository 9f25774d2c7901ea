"""Python functions the JVM can call back, through py4j's callback server.

Two Iceberg APIs the job needs take a Java functional interface: ``CommitMetadata`` runs a
``Callable`` with snapshot properties set, and ``DeleteOrphanFiles.deleteWith`` takes a
``Consumer`` (the dry run's "delete nothing, just record"). The caller must start the callback
server first (``pyspark.java_gateway.ensure_callback_server_started``).
"""

from __future__ import annotations

from collections.abc import Callable


class JavaCallable:
    """A Python function the JVM can call as a ``java.util.concurrent.Callable`` (through py4j)."""

    def __init__(self, action: Callable[[], object]) -> None:
        self.action = action
        self.error: BaseException | None = None

    def call(self) -> bool:
        try:
            self.action()
        except BaseException as error:  # kept so the caller re-raises the original, not py4j's wrapper
            self.error = error
            raise
        return True

    class Java:
        implements = ["java.util.concurrent.Callable"]


class JavaConsumer:
    """A Python function the JVM can call as a ``java.util.function.Consumer`` (through py4j)."""

    def __init__(self, action: Callable[[str], object]) -> None:
        self.action = action

    def accept(self, value: str) -> None:
        self.action(value)

    class Java:
        implements = ["java.util.function.Consumer"]
