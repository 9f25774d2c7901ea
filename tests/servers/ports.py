"""Free-port selection and port polling on the loopback interface.

Servers under test bind 127.0.0.1 only, so all helpers here look at 127.0.0.1 by default. Ports
are chosen by letting the kernel pick one (bind to port 0); the small race between closing the
probe socket and the server binding the port is accepted, as every server start re-checks
readiness with a real client call.
"""

from __future__ import annotations

import contextlib
import socket
import time

LOOPBACK = "127.0.0.1"


def free_port(host: str = LOOPBACK) -> int:
    """Returns a TCP port that is currently free on ``host``.

    Args:
        host: Address to probe; servers here bind 127.0.0.1 only.

    Returns:
        A port number chosen by the kernel.
    """
    return free_ports(1, host)[0]


def free_ports(count: int, host: str = LOOPBACK) -> list[int]:
    """Returns ``count`` distinct free TCP ports.

    All probe sockets are held open until every port is chosen; otherwise the kernel may hand
    out the same port twice, which matters for servers that need many ports at once.

    Args:
        count: How many ports to return.
        host: Address to probe.

    Returns:
        Distinct port numbers.
    """
    with contextlib.ExitStack() as stack:
        ports = []
        for _ in range(count):
            sock = stack.enter_context(socket.socket(socket.AF_INET, socket.SOCK_STREAM))
            sock.bind((host, 0))
            ports.append(sock.getsockname()[1])
        return ports


def is_port_free(port: int, host: str = LOOPBACK) -> bool:
    """Tells whether ``port`` can be bound on ``host`` right now.

    Used after a server stops, to prove it released its port, and to check ports that a server
    derives from another one (SeaweedFS's worker dials admin port + 10000).

    Args:
        port: Port to test.
        host: Address to bind.

    Returns:
        True if a listening socket could be bound to the port.
    """
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        # SO_REUSEADDR mirrors what servers do, so TIME_WAIT leftovers from finished client
        # connections do not count as "in use".
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError:
            return False
        return True


def port_accepts(host: str, port: int, timeout: float = 0.5) -> bool:
    """Tells whether something accepts TCP connections on ``host:port`` (one attempt).

    Args:
        host: Address to connect to.
        port: Port to connect to.
        timeout: Connect timeout in seconds.

    Returns:
        True if a connection was accepted.
    """
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


def wait_for_port(host: str, port: int, timeout: float) -> None:
    """Blocks until ``host:port`` accepts TCP connections.

    Args:
        host: Address to connect to.
        port: Port to connect to.
        timeout: Seconds to wait before giving up.

    Raises:
        TimeoutError: If nothing accepted a connection within ``timeout`` seconds.
    """
    deadline = time.monotonic() + timeout
    while not port_accepts(host, port):
        if time.monotonic() >= deadline:
            raise TimeoutError(f"nothing accepted connections on {host}:{port} within {timeout:.0f}s")
        time.sleep(0.05)
