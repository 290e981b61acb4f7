"""Connection ends for the store's cross-host join tests: OS events shaped as the host receiver
writes them (``docs/contracts.md``), normalized by the real ``normalize`` processor, so each is
the ``connected_to``/``accepted`` observation a gateway receives from an agent.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from otel_bridge.identity import iso_ms
from otel_bridge.model import Batch, LogRecord, Observation
from otel_bridge.processors import normalize
from otel_bridge.testing import connection_record

HOST_A = "host-a"
HOST_B = "host-b"
HOST_C = "host-c"
T0 = 1_800_000_000_000_000_000
S = 1_000_000_000
START = iso_ms(1_800_000_000_000 - 5_000)
CLIENT = ("10.0.0.1", 40001)
SERVER = ("10.0.0.2", 8080)


def os_event(
    event: str,
    host: str,
    pid: int,
    ends: tuple[tuple[str, int], tuple[str, int]],
    t: int,
    *,
    rid: str = "",
) -> LogRecord:
    """A ``network.connect`` or ``network.accept`` with both ends (local, peer), as the host
    receiver writes it on ``host``, of a process started at ``START``."""
    return connection_record(event, host, pid, ends, t, start=START, rid=rid)


def observations(*records: LogRecord) -> list[Observation]:
    """The observations ``normalize`` makes of ``records``."""
    return list(normalize.Normalizer()(Batch(logs=records)).observations)


def connect_end(
    host: str = HOST_A,
    pid: int = 100,
    local: tuple[str, int] = CLIENT,
    peer: tuple[str, int] = SERVER,
    t: int = T0,
) -> Observation:
    """The client's ``connected_to`` observation."""
    (obs,) = observations(os_event("network.connect", host, pid, (local, peer), t))
    return obs


def accept(
    host: str = HOST_B,
    pid: int = 200,
    peer: tuple[str, int] = CLIENT,
    local: tuple[str, int] = SERVER,
    t: int = T0,
) -> Observation:
    """The server's ``accepted`` observation."""
    (obs,) = observations(os_event("network.accept", host, pid, (local, peer), t))
    return obs


def at_once(work: Callable[[int], None], n: int = 2, timeout: float = 120.0) -> None:
    """Run ``work(0)`` .. ``work(n - 1)`` on ``n`` threads released together (two gateways
    storing at the same moment); re-raise the first failure of any of them."""
    barrier = threading.Barrier(n)
    failures: list[BaseException] = []

    def run(i: int) -> None:
        try:
            barrier.wait(timeout=30)
            work(i)
        except BaseException as exc:  # re-raised by the calling thread
            failures.append(exc)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(n)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=timeout)
    assert not any(t.is_alive() for t in threads), f"a thread still runs after {timeout} s"
    if failures:
        raise failures[0]
