"""Request admission: what the receivers may hold in flight before the pipeline sees it.

A receiver reads and decodes a request before any processor is called, so the memory limiter
alone cannot hold its hard limit: with many clients, every receiver thread may hold a decoded
request at once. Admission bounds that memory *before* a body is read or decoded.

**The rule.** Each request is charged an estimate of the memory it will occupy while it is
handled, :data:`COST_PER_BYTE` times its body size: first its declared (compressed) size
before the body is read, then its decompressed size as it is decompressed, and released when
the answer is sent. Requests are admitted while the charges in flight, across every OTLP
receiver (HTTP and gRPC) of the process, stay within the budget; a request that finds the
budget full waits up to :data:`WAIT_SECONDS` for room, and is then refused for now: HTTP 429
with ``Retry-After``, gRPC ``RESOURCE_EXHAUSTED`` with ``RetryInfo`` (OTLP clients retry). A
request is also refused before it is read while a registered memory limiter is refusing data
(:meth:`Gate.admission_refusal`): reading and decoding it would only be wasted; and while the
limiter takes its memory as retained state (it admits one batch at a time), a request is read
only when nothing else is in flight and its charge fits below the hard limit.

**The budget.** Each ``memory_limiter`` registers a :class:`Gate` while it runs: half its spike
headroom (hard minus soft limit). The process's budget is the smallest registered one, and
none (no bound) while no limiter runs. Memory is then at most the soft limit (where the limiter
refuses) plus the budget, under the hard limit. A single request larger than the whole budget
is admitted when nothing else is in flight, or it could never be. ``docs/contracts.md``
("Admission") states it for contributors.
"""

from __future__ import annotations

import threading
import time
from typing import Protocol

__all__ = [
    "COST_PER_BYTE",
    "WAIT_SECONDS",
    "Admission",
    "Gate",
    "Ticket",
    "admission",
]

COST_PER_BYTE = 6
"""Memory charged per body byte: decoding a protobuf body peaks at about 3.6 times its size,
a JSON body at about 5.3 times (``tracemalloc``, 1,000 spans with a 100-byte attribute); the
rest covers the raw body and the pipeline's own transient copies."""
WAIT_SECONDS = 0.5
"""How long a request waits for room in the budget before it is refused for now."""


class Gate(Protocol):
    """A limit the receivers consult (a running ``memory_limiter``)."""

    @property
    def admission_budget(self) -> int:
        """Bytes the receivers may hold in flight; 0: no bound from this gate."""

    def admission_refusal(self, cost: int, in_flight: int) -> str:
        """Why a request charged ``cost`` bytes is refused now, with ``in_flight`` bytes
        charged to others ("" to admit it)."""


class Ticket:
    """The bytes one request holds in the budget; :meth:`release` gives them back."""

    __slots__ = ("_admission", "held")

    def __init__(self, admission: Admission, held: int) -> None:
        self._admission = admission
        self.held = held

    def grow(self, total_bytes: int) -> str:
        """Raise this request's charge to ``total_bytes`` body bytes; "" when admitted, else
        why it is refused (its earlier charge is kept until :meth:`release`)."""
        want = total_bytes * COST_PER_BYTE
        if want <= self.held:
            return ""
        reason = self._admission.acquire(want - self.held, holding=self.held)
        if not reason:
            self.held = want
        return reason

    def release(self) -> None:
        """Give the charge back. Safe twice."""
        held, self.held = self.held, 0
        if held:
            self._admission.give_back(held)


class Admission:
    """The process's in-flight budget, shared by every OTLP receiver (module doc)."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._gates: list[Gate] = []
        self._used = 0
        self.peak = 0
        """The largest charge in flight so far (bytes)."""

    def register(self, gate: Gate) -> None:
        """Bound admission by ``gate`` until :meth:`unregister`."""
        with self._cond:
            self._gates.append(gate)

    def unregister(self, gate: Gate) -> None:
        """Stop consulting ``gate``. Safe twice."""
        with self._cond:
            self._gates = [g for g in self._gates if g is not gate]
            self._cond.notify_all()

    @property
    def budget(self) -> int:
        """Bytes the receivers may hold in flight; 0: unbounded."""
        with self._cond:
            return self._budget()

    @property
    def in_flight(self) -> int:
        """Bytes charged to requests in flight now."""
        with self._cond:
            return self._used

    def _budget(self) -> int:
        budgets = [b for b in (g.admission_budget for g in self._gates) if b > 0]
        return min(budgets) if budgets else 0

    def _refusal(self, cost: int) -> str:
        for gate in self._gates:
            reason = gate.admission_refusal(cost, self._used)
            if reason:
                return reason
        return ""

    def admit(self, body_bytes: int) -> Ticket | str:
        """A ticket charging ``body_bytes`` of body, or why the request is refused for now.

        The gates' verdict and the charge are taken together (under one lock), so two requests
        never both pass on the same reading."""
        want = max(body_bytes, 1) * COST_PER_BYTE
        deadline = time.monotonic() + WAIT_SECONDS
        with self._cond:
            if not self._gates:
                return Ticket(self, 0)
            while True:
                reason = self._refusal(want)
                if reason:
                    return reason
                if self._fits(want, 0):
                    self._take(want)
                    return Ticket(self, want)
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return self._full()
                self._cond.wait(remaining)

    def acquire(self, nbytes: int, *, holding: int) -> str:
        """Take ``nbytes`` from the budget, waiting up to :data:`WAIT_SECONDS`; "" when taken.

        ``holding`` is what the caller already holds: a request alone in flight is always
        admitted, whatever its size."""
        with self._cond:
            if not self._cond.wait_for(lambda: self._fits(nbytes, holding), timeout=WAIT_SECONDS):
                return self._full()
            self._take(nbytes)
            return ""

    def _full(self) -> str:
        return (
            f"{self._used // 1024} KiB of requests in flight, the receivers' budget is "
            f"{self._budget() // 1024} KiB (half the memory limiter's spike headroom)"
        )

    def _take(self, nbytes: int) -> None:
        self._used += nbytes
        self.peak = max(self.peak, self._used)

    def _fits(self, nbytes: int, holding: int) -> bool:
        budget = self._budget()
        return not budget or self._used + nbytes <= budget or self._used == holding

    def give_back(self, nbytes: int) -> None:
        """Return ``nbytes`` to the budget and wake the requests waiting for room."""
        with self._cond:
            self._used -= nbytes
            self._cond.notify_all()


admission = Admission()
"""The process's admission (memory is the process's: one budget for all receivers)."""
