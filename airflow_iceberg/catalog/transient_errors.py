"""Tell an outage, worth waiting out, from a configuration error, which waiting does not fix.

The snapshot sensor and trigger read a catalog and its metadata files through many clients:
SQLAlchemy and psycopg2 or sqlite3, thrift (Hive), pyiceberg's REST client (requests), boto3
(Glue) and pyarrow's file systems (S3, GCS, HDFS). Each reports a catalog or store that is down,
slow, overloaded or restarting in its own way; :func:`is_transient_error` knows them all.
"""

from __future__ import annotations

import errno
import re
from collections.abc import Iterator

#: errno values of a network that refused, dropped or timed out, not of a wrong path or permission.
_TRANSIENT_ERRNOS = frozenset(
    {
        errno.ECONNREFUSED,
        errno.ECONNRESET,
        errno.ECONNABORTED,
        errno.ETIMEDOUT,
        errno.EHOSTUNREACH,
        errno.ENETUNREACH,
        errno.ENETDOWN,
        errno.EPIPE,
        errno.EAGAIN,
    }
)
#: What drivers that only raise a generic error (psycopg2, SQLite, pyarrow's S3 and HDFS) say
#: when the server is down, restarting, overloaded or slow. pyarrow's S3 errors name the HTTP
#: status (``AWS Error UNKNOWN (HTTP status 503)``) or the AWS SDK's error type (``SLOW_DOWN``).
_TRANSIENT_MESSAGE = re.compile(
    r"connection refused|could not connect|couldn't connect|timed out|timeout expired"
    r"|server closed the connection|connection (?:was )?reset|broken pipe|temporarily unavailable"
    r"|temporary failure in name resolution|the database system is (?:starting up|shutting down)"
    r"|terminating connection|database is locked|too many connections|network_connection"
    r"|HTTP status (?:5[0-9][0-9]|429)\b"
    r"|AWS Error (?:SLOW_DOWN|THROTTLING|SERVICE_UNAVAILABLE|INTERNAL_FAILURE|REQUEST_TIMEOUT"
    r"|REQUEST_LIMIT_EXCEEDED)\b",
    re.IGNORECASE,
)
#: pyiceberg's REST errors for 5xx and 429 answers.
_TRANSIENT_REST_ERRORS = ("ServerError", "ServiceUnavailableError", "TooManyRequestsError")
#: botocore's errors for an endpoint it could not reach or that did not answer in time.
_TRANSIENT_BOTOCORE_ERRORS = (
    "EndpointConnectionError",
    "ConnectTimeoutError",
    "ReadTimeoutError",
    "ConnectionClosedError",
)
#: AWS error codes of a throttled or failing service (botocore ``ClientError``: Glue, S3, STS).
_TRANSIENT_AWS_CODES = frozenset(
    {
        "SlowDown",
        "Throttling",
        "ThrottlingException",
        "ThrottledException",
        "RequestLimitExceeded",
        "TooManyRequestsException",
        "ProvisionedThroughputExceededException",
        "ServiceUnavailable",
        "ServiceUnavailableException",
        "InternalError",
        "InternalFailure",
        "InternalServiceException",
        "RequestTimeout",
        "RequestTimeoutException",
    }
)
#: thrift's TTransportException types for a socket that would not open, timed out or closed.
_TRANSIENT_THRIFT_TYPES = (1, 3, 4)  # NOT_OPEN, TIMED_OUT, END_OF_FILE


def is_transient_error(error: BaseException) -> bool:
    """Whether reading a catalog failed for a reason that passes: the catalog or its store is
    unreachable, slow, overloaded, throttling or restarting (connection refused or reset, a
    timeout, an HTTP 5xx or 429, an AWS throttling or internal-failure code).

    Anything else (a wrong connection, credentials refused, a missing namespace, a bug) is not:
    waiting would not fix it. The error, its cause and its context are all looked at, since
    clients wrap socket errors in their own.
    """
    return any(_is_transient(cause) for cause in _causes(error))


def _causes(error: BaseException) -> Iterator[BaseException]:
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        yield current
        current = current.__cause__ or current.__context__


def _is_transient(error: BaseException) -> bool:
    if isinstance(error, (ConnectionError, TimeoutError)):  # refused, reset, aborted, socket timeouts
        return True
    name = type(error).__name__
    if name in _TRANSIENT_REST_ERRORS or name in _TRANSIENT_BOTOCORE_ERRORS:
        return True
    if name == "ClientError":  # botocore: the service answered with an error code
        return _is_transient_aws_answer(getattr(error, "response", None))
    if name == "TTransportException":
        return getattr(error, "type", None) in _TRANSIENT_THRIFT_TYPES
    if isinstance(error, OSError) or name in ("OperationalError", "InterfaceError", "DisconnectionError"):
        # OSError: sockets, pyarrow's file systems, requests; the others are SQLAlchemy's
        if getattr(error, "errno", None) in _TRANSIENT_ERRNOS:
            return True
        return getattr(error, "connection_invalidated", False) or bool(_TRANSIENT_MESSAGE.search(str(error)))
    return False


def _is_transient_aws_answer(response: object) -> bool:
    if not isinstance(response, dict):
        return False
    code = str((response.get("Error") or {}).get("Code", ""))
    status = (response.get("ResponseMetadata") or {}).get("HTTPStatusCode")
    return code in _TRANSIENT_AWS_CODES or (isinstance(status, int) and (status >= 500 or status == 429))
