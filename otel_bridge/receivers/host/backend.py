"""The small contract every host backend implements."""

from __future__ import annotations

from typing import Protocol

from otel_bridge.receivers.host.events import HostContext


class Backend(Protocol):
    """One way of observing the lineage. Constructed by :func:`open_backend`.

    The constructor checks that the backend can run here and raises
    :class:`~otel_bridge.errors.BackendUnavailableError` with the reason when it cannot; it
    acquires nothing else. ``start`` begins observation (events go to ``ctx``) and reports the
    collection states; ``stop`` ends it and flushes, and is safe twice.
    """

    name: str
    why: str
    """One line on what this backend sees and what it cannot (for the summary)."""

    def start(self, ctx: HostContext) -> None:
        """Attach to the lineage ``ctx.lineage`` and start emitting."""

    def follow(self, pid: int) -> str:
        """Adopt ``pid`` and its running descendants into the lineage after start (a standing
        collector learned it, :mod:`.follow`); ``""`` when followed, else why it cannot be."""

    def stop(self) -> None:
        """Detach, emit what is pending. Safe twice and before start."""
