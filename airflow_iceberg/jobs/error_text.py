"""One line that says what went wrong: for the job's result file and for the operator's exception.

Both execution paths of an operation fail with the same words: the Spark job reports its error
through :func:`describe_error` in its result file, and the worker, which runs publish, tag and
rollback through pyiceberg without Spark, describes its own errors with the same function.
Standard library only (a Spark Connect error is read through its methods), so the worker imports
it without pyspark.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from airflow_iceberg.jobs import connect

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

#: Spark Connect error classes that mean the server no longer has the task's session.
SESSION_LOST = (
    "INVALID_HANDLE.SESSION_NOT_FOUND",
    "INVALID_HANDLE.SESSION_CLOSED",
    "INVALID_HANDLE.SESSION_CHANGED",
    "INVALID_HANDLE.OPERATION_ABANDONED",
)


def describe_error(error: BaseException) -> str:
    """One line that says what went wrong, for the result file and the operator's exception.

    A Py4JJavaError's own text is only "An error occurred while calling o123.append"; the Java
    exception it carries (e.g. Iceberg's ValidationException) says what actually happened. A
    Spark Connect error carries the server's chain of causes as text: its root is named too
    ("Failed to close current writer" caused by S3's 403). A session the server lost (a restart,
    a release) gets a sentence that says so, and what to do.
    """
    java = getattr(error, "java_exception", None)
    if java is None:
        return session_lost(error) or _with_connect_cause(error)
    text = _java_summary(java)
    root = java
    while root.getCause() is not None and not root.getCause().equals(root):
        root = root.getCause()
    if not root.equals(java):  # e.g. "Failed to connect" caused by "password authentication failed"
        text += f" (caused by {_java_summary(root)})"
    return text


def session_lost(error: BaseException) -> str | None:
    """What to tell the user when a Spark Connect error says the task's session is gone, else None.

    The server's message names the session's id, which grants access to it: it is left out.
    """
    condition = _error_condition(error)
    if condition == "RESPONSE_ALREADY_RECEIVED":  # the client's word for a reattach that found nothing
        condition = str((_message_parameters(error) or {}).get("error_type", condition))
    if condition not in SESSION_LOST:
        return None
    return (
        f"the Spark Connect server no longer has this task's session ({condition}): it restarted, or "
        "the session was released or expired, while the task ran. What the job had not committed "
        "is dropped with it. Retrying is safe: the retry waits until no earlier try can commit, then "
        "finds a commit that did land by its commit id and writes only if there is none"
    )


def session_lost_under(spark: SparkSession, error: BaseException) -> str | None:
    """The session-lost sentence when a Connect operation was cancelled because its session went away.

    A server that releases (or loses) a session cancels the operations running in it, and the
    client then sees ``OPERATION_CANCELED``, not a session error; only the next call on the
    session says ``SESSION_CLOSED``. So a cancellation is followed by one cheap call, which tells
    a lost session from an interrupt of a session that is still there (the task's own kill).
    """
    cancelled = _error_condition(error) == "OPERATION_CANCELED" or "[OPERATION_CANCELED]" in str(error)
    if not cancelled or not connect.is_connect(spark):
        return None
    try:
        spark.conf.get("spark.sql.session.timeZone")
    except Exception as probe_error:
        return session_lost(probe_error)
    return None


def _error_condition(error: BaseException) -> str | None:
    for name in ("getCondition", "getErrorClass"):  # Spark 4, Spark 3.5
        method = getattr(error, name, None)
        if callable(method):
            try:
                return method()
            except Exception:  # an error class the client does not know
                return None
    return None


def _message_parameters(error: BaseException) -> dict[str, Any] | None:
    method = getattr(error, "getMessageParameters", None)
    try:
        return method() if callable(method) else None
    except Exception:
        return None


def _with_connect_cause(error: BaseException) -> str:
    """The error's first line, and its root cause when the server sent the chain (Spark Connect)."""
    text = _first_line(f"{type(error).__name__}: {error}")
    trace_of = getattr(error, "getStackTrace", None)
    trace = trace_of() if callable(trace_of) else None
    if not isinstance(trace, str):
        return text
    causes = [line[len("Caused by: ") :] for line in trace.splitlines() if line.startswith("Caused by: ")]
    if not causes:
        return text
    name, colon, message = causes[-1].partition(": ")
    root = _first_line(f"{name.rsplit('.', 1)[-1]}: {message}" if colon else name.rsplit(".", 1)[-1])
    return text if root in text else f"{text} (caused by {root})"


def _java_summary(throwable: Any) -> str:
    message = throwable.getMessage()
    text = f"{throwable.getClass().getSimpleName()}: {message}" if message else str(throwable.toString())
    return _first_line(text)


def _first_line(text: str) -> str:
    """The message's first line, and the next one if the first ends with a colon.

    Spark 4 breaks some messages right after the colon that introduces what they are about
    ("NULL value appeared in non-nullable field: \nid"), which the first line alone would lose.
    """
    lines = [line.strip() for line in text.strip().splitlines()] or [""]
    if lines[0].endswith(":") and len(lines) > 1:
        return f"{lines[0]} {lines[1]}"
    return lines[0]
