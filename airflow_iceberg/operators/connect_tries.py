"""Exactly-once over Spark Connect: before a try writes, no earlier try of its commit can still commit.

Over spark-submit a killed worker takes its driver with it. Over Spark Connect it does not: the
write runs on the server as a reattachable *operation*, which keeps running (and may commit)
after the client that started it died, until the server gives up on it
(``spark.connect.execute.manager.detachedTimeout``, 5 minutes by default). A retry that looked
for the earlier commit at once could miss a commit that lands a moment later, and write twice.

So every run of every try of a commit gets ids the task's tries can compute again, and nobody
else can (:class:`CommitKeys`): a session id and the id of the one operation that commits. A
try first *settles* every earlier run (:meth:`EarlierRuns.settle`), on the server, by those ids:

1. It claims the committing operation's id in that run's session with a trivial plan. The
   server refuses a second operation with one id, so from now on that run cannot start its
   write; if the id is taken, the write is running or over, and the try reattaches to it and
   reads its stream to the end (a reattached stream ends only when the execution thread has
   finished: committed, failed or interrupted).
2. It releases that run's session. A released session id is refused for good, so nothing of
   that run (a zombie worker, say) can do anything more.

Only then does the job look for the earlier commit, and write if there is none. Each run of a try
uses the first session id of its sequence the server has never seen, so running one try twice
(``airflow tasks test``) settles the first run too.

Limits (docs/spark-connect.md): the server must be the one the earlier try used (sessions live in
one server's memory; a restart ends them all, which is safe). An operation the server already
removed as abandoned (after ``detachedTimeout``, or with its session after
``spark.connect.session.manager.defaultSessionTimeout``) was interrupted without the server
waiting for its thread; a commit already in flight then may still land moments later.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import logging

#: The user id of a task's sessions when its connection has no Login: sessions are keyed by
#: (user id, session id), so every try must use the same one (pyspark's default, ``$USER``, is
#: the worker's, and workers may differ).
DEFAULT_USER_ID = "airflow-iceberg"
#: The ``client_type`` this module's own requests carry (the server logs it).
CLIENT_TYPE = "airflow-iceberg"
#: The session or operation cannot run (any more): never created, released, expired, abandoned.
ENDED = frozenset(
    {
        "INVALID_HANDLE.OPERATION_NOT_FOUND",
        "INVALID_HANDLE.OPERATION_ABANDONED",
        "INVALID_HANDLE.SESSION_NOT_FOUND",
        "INVALID_HANDLE.SESSION_CLOSED",
    }
)
#: Reattached, but somebody else reattached after us (a live zombie), or the run was not
#: reattachable: watch the operation by claiming its id until it is gone.
WATCH_BY_CLAIMING = frozenset({"INVALID_CURSOR.DISCONNECTED", "INVALID_CURSOR.NOT_REATTACHABLE"})
#: Error classes about handles and cursors, not about what an operation did.
PROTOCOL_ERRORS = ("INVALID_HANDLE.", "INVALID_CURSOR.")
#: Seconds between two claims while watching an operation someone else is attached to.
CLAIM_INTERVAL_SECONDS = 2.0


class SettleError(RuntimeError):
    """An earlier try's operation could not be proven over; the try must not write."""


@dataclass(frozen=True)
class TryNumbers:
    """This try's number and the first try of its commit id (Airflow's ``try_number`` counting)."""

    first: int
    current: int


@dataclass(frozen=True)
class RunIds:
    """The server-side ids of one run of one try: its session and its committing operation.

    Both grant access (``sc://...;session_id=<id>`` joins the session), so they are never
    logged; :attr:`fingerprint` is what logs carry.
    """

    session_id: str
    operation_id: str

    @property
    def fingerprint(self) -> str:
        """8 hex digits of the session id's SHA-256: matches the server's log, reveals nothing."""
        return fingerprint(self.session_id)


def fingerprint(value: str) -> str:
    """A short, one-way digest of an id, for logs."""
    return hashlib.sha256(value.encode()).hexdigest()[:8]


class CommitKeys:
    """Derives the ids of every run of every try of one commit (HMAC-SHA256).

    The key is made of the task's secrets: the Spark Connect token and the catalogs' secret
    settings. Whoever can compute an id already holds everything the session holds (the token
    to reach the server and the catalog credentials), so the ids give nobody anything new.
    Without any secret the ids follow from the commit id, which is not secret; such a session
    then holds nothing a session of one's own would not give, on a server anyone can reach.
    A secret changed between a try and its retry changes the ids: rotate between runs.

    :param commit_id: The commit id of the task instance (``operators.base``).
    :param secrets: The secret values (token, catalog secrets), in a stable order.
    """

    def __init__(self, commit_id: str, secrets: Sequence[str]) -> None:
        self._commit_id = commit_id
        material = "\0".join(["airflow-iceberg spark connect ids", *secrets])
        self._key = hashlib.sha256(material.encode()).digest()

    def run(self, try_number: int, attempt: int) -> RunIds:
        """The ids of run ``attempt`` (0, 1 ...) of try ``try_number``."""
        return RunIds(
            session_id=self._uuid("session", try_number, attempt),
            operation_id=self._uuid("commit", try_number, attempt),
        )

    def _uuid(self, purpose: str, try_number: int, attempt: int) -> str:
        message = f"{purpose}\0{self._commit_id}\0{try_number}\0{attempt}".encode()
        digest = hmac.new(self._key, message, hashlib.sha256).digest()
        return str(uuid.UUID(bytes=digest[:16], version=4))


def error_class(error: Any) -> tuple[str | None, dict[str, str]]:
    """The server's error class and message parameters of a gRPC error (``(None, {})`` if none).

    Spark Connect puts them in the status's ``google.rpc.ErrorInfo`` details; a transport error
    (server down, deadline) has none.
    """
    from google.rpc import error_details_pb2
    from grpc_status import rpc_status

    try:
        status = rpc_status.from_call(error)
    except Exception:  # not a call, or malformed details
        status = None
    for detail in status.details if status is not None else ():
        if detail.Is(error_details_pb2.ErrorInfo.DESCRIPTOR):
            info = error_details_pb2.ErrorInfo()
            detail.Unpack(info)
            try:
                parameters = json.loads(info.metadata.get("messageParameters") or "{}")
            except ValueError:
                parameters = {}
            return info.metadata.get("errorClass") or info.reason or "", parameters
    return None, {}


class RemoteOperations:
    """The few Spark Connect RPCs that watch and end other sessions' operations, by id.

    Raw requests on a channel of its own, built like the task's session's (same URL, token, TLS
    and user id), because pyspark's session API only reaches its own session, and its
    reattaching iterator would re-send a plan it cannot know.

    :param url: The ``sc://`` URL of the server, with the token and ``user_id``; never logged.
    """

    def __init__(self, url: str) -> None:
        import pyspark.sql.connect.proto as pb2
        import pyspark.sql.connect.proto.base_pb2_grpc as grpc_lib
        from pyspark.sql.connect.client import DefaultChannelBuilder

        self._pb2 = pb2
        builder = DefaultChannelBuilder(url)
        self._metadata = list(builder.metadata())
        self._user = pb2.UserContext(user_id=builder.userId or "")
        self._channel = builder.toChannel()
        self._stub = grpc_lib.SparkConnectServiceStub(self._channel)
        self._stopped = threading.Event()
        self._call: Any = None
        self._last_response: str | None = None

    def close(self) -> None:
        self._channel.close()

    def stop(self) -> None:
        """Make a wait in another thread (or under a signal handler) give up at once."""
        self._stopped.set()
        call = self._call
        if call is not None:
            call.cancel()

    def session_state(self, session_id: str) -> str:
        """``absent`` (never seen, or gone with a restart), ``closed`` or ``open``; changes nothing.

        A reattach to an operation id nobody uses: the server answers from the session alone.
        """
        request = self._pb2.ReattachExecuteRequest(
            session_id=session_id,
            user_context=self._user,
            operation_id=str(uuid.uuid4()),
            client_type=CLIENT_TYPE,
        )
        kind = self._first_error(lambda: self._stub.ReattachExecute(request, metadata=self._metadata))
        if kind == "INVALID_HANDLE.SESSION_NOT_FOUND":
            return "absent"
        if kind == "INVALID_HANDLE.SESSION_CLOSED":
            return "closed"
        if kind == "INVALID_HANDLE.OPERATION_NOT_FOUND":
            return "open"
        raise SettleError(f"the Spark Connect server answered a session probe with {kind or 'no error'}")

    def claim(self, ids: RunIds) -> bool:
        """Take the committing operation's id in its session; False when it is already taken.

        The claim is a reattachable plan that returns no rows. The server keeps it until the
        session goes, so the run it belongs to can never start an operation with that id.
        """
        pb2 = self._pb2
        request = pb2.ExecutePlanRequest(
            session_id=ids.session_id,
            user_context=self._user,
            operation_id=ids.operation_id,
            client_type=CLIENT_TYPE,
            plan=pb2.Plan(root=pb2.Relation(range=pb2.Range(start=0, end=0, step=1))),
        )
        request.request_options.append(
            pb2.ExecutePlanRequest.RequestOption(reattach_options=pb2.ReattachOptions(reattachable=True))
        )
        kind = self._first_error(lambda: self._stub.ExecutePlan(request, metadata=self._metadata))
        if kind is None or kind in ENDED:
            return True
        if kind == "INVALID_HANDLE.OPERATION_ALREADY_EXISTS":
            return False
        raise SettleError(f"the Spark Connect server refused to claim an operation id: {kind}")

    def wait_until_ended(self, ids: RunIds, timeout: float | None = None, stoppable: bool = True) -> bool:
        """Read the operation's stream until it ends; True once it has, False on ``timeout``.

        It ends with ResultComplete or with the operation's own error, both sent only when its
        execution thread is done; "not found", "abandoned" or a gone session mean it can no
        longer run either. Responses the dead client already released are skipped by id.
        ``stoppable=False``: a :meth:`stop` already made (the kill that caused this wait) does
        not end it.
        """
        import grpc

        deadline = None if timeout is None else time.monotonic() + timeout
        last_response: str | None = None
        while not (stoppable and self._stopped.is_set()):
            remaining = None if deadline is None else max(deadline - time.monotonic(), 0.001)
            try:
                if self._follow(ids, last_response, remaining):
                    return True
                last_response = self._last_response
            except grpc.RpcError as error:
                if stoppable and self._stopped.is_set():
                    break
                verdict, last_response = self._verdict(error, ids)
                if verdict is not None:
                    return verdict
        raise SettleError("stopped while waiting for an earlier Spark Connect operation to end")

    def _follow(self, ids: RunIds, last_response: str | None, timeout: float | None) -> bool:
        """One ReattachExecute, read to its end: True at ResultComplete; False when the server
        ended the stream early (it does after ``senderMaxStreamDuration``), to reattach."""
        request = self._pb2.ReattachExecuteRequest(
            session_id=ids.session_id,
            user_context=self._user,
            operation_id=ids.operation_id,
            client_type=CLIENT_TYPE,
        )
        if last_response:
            request.last_response_id = last_response
        self._last_response = last_response
        self._call = self._stub.ReattachExecute(request, metadata=self._metadata, timeout=timeout)
        try:
            for response in self._call:
                self._last_response = response.response_id
                if response.HasField("result_complete"):
                    return True
        finally:
            self._call = None
        return False

    def _verdict(self, error: Any, ids: RunIds) -> tuple[bool | None, str | None]:
        """What a failed reattach says: ended (True), timed out (False), or reattach from here."""
        import grpc

        if error.code() == grpc.StatusCode.DEADLINE_EXCEEDED:
            return False, None
        kind, parameters = error_class(error)
        if kind == "INVALID_CURSOR.POSITION_NOT_AVAILABLE" and parameters.get("responseId"):
            return None, parameters["responseId"]  # released by its dead client: skip it
        if kind in WATCH_BY_CLAIMING:
            return self._watch_by_claiming(ids), None
        if kind in ENDED or (kind and not kind.startswith(PROTOCOL_ERRORS)):
            return True, None  # gone, or ended with the operation's own error
        raise SettleError(
            f"could not follow an earlier Spark Connect operation: {kind or error.code().name}"
        ) from None

    def release_session(self, session_id: str) -> None:
        """Close the session for good: the server refuses its id from now on."""
        request = self._pb2.ReleaseSessionRequest(
            session_id=session_id, user_context=self._user, client_type=CLIENT_TYPE
        )
        self._stub.ReleaseSession(request, metadata=self._metadata)

    def _watch_by_claiming(self, ids: RunIds) -> bool:
        """Someone else reads the operation (a zombie worker that is still alive): claim its id
        every few seconds; the claim succeeds once that reader has released the finished one."""
        while not self._claim_or_wait(ids):
            pass
        return True

    def _claim_or_wait(self, ids: RunIds) -> bool:
        if self.claim(ids):
            return True
        if self._stopped.wait(CLAIM_INTERVAL_SECONDS):
            raise SettleError("stopped while waiting for an earlier Spark Connect operation to end")
        return False

    def _first_error(self, call: Callable[[], Any]) -> str | None:
        """Run a streaming call to its end; the error class it failed with, or None."""
        import grpc

        try:
            for _ in call():
                pass
        except grpc.RpcError as error:
            kind, _ = error_class(error)
            if kind is None:
                raise SettleError(
                    f"the Spark Connect server could not be asked about earlier tries: {error.code().name}"
                ) from None
            return kind
        return None


class EarlierRuns:
    """What a try does, before its job runs, about the runs of its commit that came before it.

    :param remote: The RPCs, on a channel to the same server.
    :param keys: The commit's id derivation.
    :param log: The operator's logger (fingerprints only, never ids).
    """

    def __init__(self, remote: RemoteOperations, keys: CommitKeys, log: logging.Logger) -> None:
        self.remote = remote
        self.keys = keys
        self.log = log

    def settle(self, first_try: int, current_try: int) -> RunIds:
        """Settle every run of tries ``first_try`` .. ``current_try``; return this run's ids.

        Runs of one try are numbered 0, 1 ...; scanning one try stops at the first session id the
        server has never seen, which for the current try is the one this run takes.
        """
        for try_number in range(first_try, current_try + 1):
            attempt = 0
            while True:
                ids = self.keys.run(try_number, attempt)
                state = self.remote.session_state(ids.session_id)
                if state == "absent":
                    if try_number == current_try:
                        return ids
                    break
                if state == "open":
                    self._settle_run(try_number, ids)
                attempt += 1
        raise AssertionError("unreachable: the current try always ends the scan")

    def _settle_run(self, try_number: int, ids: RunIds) -> None:
        if not self.remote.claim(ids):
            self.log.info(
                "Try %d of this commit is still running its write on the Spark Connect server "
                "(session %s); waiting for it to end before looking for its commit",
                try_number,
                ids.fingerprint,
            )
            self.remote.wait_until_ended(ids)
        self.remote.release_session(ids.session_id)
        self.log.info(
            "Try %d's Spark Connect session %s is released: nothing of it can commit any more",
            try_number,
            ids.fingerprint,
        )
