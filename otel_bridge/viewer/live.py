"""Live mode: the viewer served while a collector runs (``observe --view``).

A :class:`LiveView` polls a graph source (the ``graph`` exporter's ``snapshot``, read by duck
typing: this module imports no component) every ``interval`` seconds and, when the graph
changed, replaces the bundle's graph and bumps its version; the server tells each open page over
server-sent events and the page refetches ``data.json`` and redraws with the same code a
finished run uses. Updates are coalesced to at most one per interval however fast events arrive,
so the page's work is bounded by the interval, not by the event rate.
"""

from __future__ import annotations

import sys
import threading
import webbrowser
from collections.abc import Callable
from typing import Any

from otel_bridge.errors import OtelBridgeError
from otel_bridge.viewer.data import Bundle
from otel_bridge.viewer.server import BundleState, ViewServer

Snapshot = Callable[[], dict[str, Any]]
FINAL_FETCH_WAIT_S = 3.0
"""How long ``finish`` waits for an open page to read the final graph before the server stops."""


def _fingerprint(doc: dict[str, Any]) -> tuple[Any, ...]:
    summary = doc.get("summary") or {}
    return (
        summary.get("observations"),
        summary.get("nodes"),
        summary.get("edges"),
        summary.get("coverage_total"),
    )


class LiveView:
    """A server plus the thread that feeds it from ``snapshot``."""

    def __init__(
        self, snapshot: Snapshot, *, source: str, port: int = 0, interval: float = 0.25
    ) -> None:
        self._snapshot = snapshot
        self._interval = interval
        self.state = BundleState(Bundle(source=source, graph=snapshot(), live=True, ended=False))
        self.server = ViewServer(self.state, port)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._feed, name="otel-bridge-live", daemon=True)
        self._last = _fingerprint(self.state.bundle.graph or {})

    @property
    def url(self) -> str:
        """The page's address."""
        return self.server.url

    def start(self) -> None:
        """Serve and start feeding."""
        self.server.start()
        self._thread.start()

    def _publish(self, doc: dict[str, Any], *, ended: bool = False) -> None:
        def change(bundle: Bundle) -> None:
            bundle.graph = doc
            bundle.ended = ended

        self.state.update(change)

    def _feed(self) -> None:
        while not self._stop.wait(self._interval):
            doc = self._snapshot()
            mark = _fingerprint(doc)
            if mark != self._last:
                self._last = mark
                self._publish(doc)

    def finish(self, summary: dict[str, Any] | None = None) -> None:
        """Publish the final graph (``ended``), let open pages read it, stop serving."""
        self._stop.set()
        self._thread.join()
        doc = self._snapshot()

        def change(bundle: Bundle) -> None:
            bundle.graph = doc
            bundle.summary = summary
            bundle.ended = True

        self.state.update(change)
        self.state.wait_fetched(FINAL_FETCH_WAIT_S)
        self.server.stop()


def attach(collector: Any, exporter_id: str, source: str, *, open: bool) -> LiveView:
    """Start a live view of ``collector``'s graph exporter ``exporter_id``; prints its address."""
    exporter = collector.component(exporter_id)
    snapshot = getattr(exporter, "snapshot", None)
    if not callable(snapshot):
        raise OtelBridgeError(f"--view: component {exporter_id} has no graph snapshot")
    try:
        live = LiveView(snapshot, source=source)
    except OSError as exc:
        raise OtelBridgeError(f"--view: cannot listen on 127.0.0.1: {exc.strerror}") from exc
    live.start()
    print(f"otel-bridge observe: live view at {live.url}", file=sys.stderr, flush=True)
    if open:
        threading.Thread(target=webbrowser.open, args=(live.url,), daemon=True).start()
    return live
