"""The local HTTP server of the viewer: 127.0.0.1 only, read-only, one bundle (or a live one).

Routes (all GET): ``/`` the page, ``/assets/<file>`` its shipped scripts and style,
``/data.json`` the bundle, ``/events`` server-sent events (``event: bundle``, data = the bundle's
version) so a live page refetches ``data.json`` when the bundle changed, and
``/run/<run id>/...`` the same routes for a run a ``compare.json`` lists (click-through to its own
graph; only listed runs, never an arbitrary path). Requests whose ``Host`` is not this loopback
address are refused (a web page elsewhere cannot read the run through DNS rebinding).
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import PurePosixPath
from typing import Any
from urllib.parse import unquote, urlsplit

from otel_bridge.errors import OtelBridgeError
from otel_bridge.viewer.data import Bundle, load_bundle
from otel_bridge.viewer.page import ASSET_TYPES, SERVED_CSP, asset, render

LOOPBACK = "127.0.0.1"
KEEPALIVE_S = 15.0
"""Seconds between SSE comments that keep an idle event stream open."""


class BundleState:
    """The bundle a server shows, with a version that changes whenever the bundle does."""

    def __init__(self, bundle: Bundle) -> None:
        self._bundle = bundle
        self._encoded = _encode(bundle)
        self.version = 1
        self._changed = threading.Condition()
        self.closed = False
        self.fetched = 0
        """The newest version a client has read through ``/data.json``."""

    @property
    def bundle(self) -> Bundle:
        """The current bundle."""
        return self._bundle

    def encoded(self) -> tuple[int, bytes]:
        """The current version and the bundle as JSON bytes."""
        with self._changed:
            return self.version, self._encoded

    def update(self, change: Callable[[Bundle], None]) -> None:
        """Apply ``change`` to the bundle and wake every event stream."""
        with self._changed:
            change(self._bundle)
            self._encoded = _encode(self._bundle)
            self.version += 1
            self._changed.notify_all()

    def wait_newer(self, version: int, timeout: float) -> int:
        """Block until the version differs from ``version`` (or timeout, or close); the version."""
        with self._changed:
            self._changed.wait_for(lambda: self.version != version or self.closed, timeout)
            return self.version

    def mark_fetched(self, version: int) -> None:
        """Record that a client read ``version``."""
        with self._changed:
            self.fetched = max(self.fetched, version)
            self._changed.notify_all()

    def wait_fetched(self, timeout: float) -> bool:
        """Block until a client has read the current version (or timeout); whether one did."""
        with self._changed:
            return self._changed.wait_for(lambda: self.fetched >= self.version, timeout)

    def close(self) -> None:
        """End every event stream."""
        with self._changed:
            self.closed = True
            self._changed.notify_all()


def _encode(bundle: Bundle) -> bytes:
    return json.dumps(bundle.to_page_json(), separators=(",", ":")).encode()


class ViewServer(ThreadingHTTPServer):
    """The HTTP server; ``state`` is what it serves. Port 0 picks a free port."""

    daemon_threads = True
    allow_reuse_address = False

    def __init__(self, state: BundleState, port: int = 0) -> None:
        self.state = state
        self._runs: dict[str, BundleState] = {}
        self._runs_lock = threading.Lock()
        super().__init__((LOOPBACK, port), _Handler)

    @property
    def url(self) -> str:
        """The page's address."""
        return f"http://{LOOPBACK}:{self.server_address[1]}/"

    def run_state(self, run_id: str) -> BundleState | None:
        """The bundle of a run the served ``compare.json`` lists (loaded once), else None."""
        path = self.state.bundle.compare_run_path(run_id)
        if path is None:
            return None
        with self._runs_lock:
            if run_id not in self._runs:
                try:
                    bundle = load_bundle(path, self.state.bundle.trace_links)
                except OtelBridgeError:
                    return None
                self._runs[run_id] = BundleState(bundle)
            return self._runs[run_id]

    def start(self) -> threading.Thread:
        """Serve from a daemon thread; returns it."""
        thread = threading.Thread(target=self.serve_forever, name="otel-bridge-view", daemon=True)
        thread.start()
        return thread

    def stop(self) -> None:
        """End the event streams, stop serving and close the socket."""
        self.state.close()
        for state in list(self._runs.values()):
            state.close()
        self.shutdown()
        self.server_close()


class _Handler(BaseHTTPRequestHandler):
    server: ViewServer
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:
        del format, args  # quiet: the command prints the address once

    def do_GET(self) -> None:
        if not self._host_allowed():
            self._send(HTTPStatus.FORBIDDEN, b"forbidden host\n", "text/plain")
            return
        path = unquote(urlsplit(self.path).path)
        state: BundleState | None = self.server.state
        if path.startswith("/run/"):
            run_id, _, rest = path[len("/run/") :].partition("/")
            state = self.server.run_state(run_id)
            path = "/" + rest
        if state is None:
            self._send(HTTPStatus.NOT_FOUND, b"no such run\n", "text/plain")
            return
        self._route(state, path)

    def _route(self, state: BundleState, path: str) -> None:
        if path in ("/", "/index.html"):
            self._send(HTTPStatus.OK, render(None).encode(), "text/html; charset=utf-8")
        elif path == "/data.json":
            version, body = state.encoded()
            state.mark_fetched(version)
            self._send(HTTPStatus.OK, body, "application/json", {"X-Bundle-Version": str(version)})
        elif path == "/events":
            self._events(state)
        elif path.startswith("/assets/"):
            name = path[len("/assets/") :]
            data = asset(name)
            if data is None:
                self._send(HTTPStatus.NOT_FOUND, b"no such asset\n", "text/plain")
            else:
                kind = ASSET_TYPES.get(PurePosixPath(name).suffix, "application/octet-stream")
                self._send(HTTPStatus.OK, data, kind)
        else:
            self._send(HTTPStatus.NOT_FOUND, b"not found\n", "text/plain")

    def _host_allowed(self) -> bool:
        host = self.headers.get("Host", "")
        port = self.server.server_address[1]
        return host in (f"{LOOPBACK}:{port}", f"localhost:{port}")

    def _send(
        self, status: HTTPStatus, body: bytes, kind: str, extra: dict[str, str] | None = None
    ) -> None:
        self.send_response(status)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Cache-Control", "no-store")
        self.send_header("Content-Security-Policy", SERVED_CSP)
        self.send_header("X-Content-Type-Options", "nosniff")
        for k, v in (extra or {}).items():
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(body)

    def _events(self, state: BundleState) -> None:
        self.send_response(HTTPStatus.OK)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-store")
        self.send_header("Connection", "close")
        self.end_headers()
        self.close_connection = True
        version = 0
        try:
            while not state.closed:
                newer = state.wait_newer(version, KEEPALIVE_S)
                if newer != version:
                    version = newer
                    self.wfile.write(f"event: bundle\ndata: {version}\n\n".encode())
                elif not state.closed:
                    self.wfile.write(b": keepalive\n\n")
                self.wfile.flush()
            self.wfile.write(b"event: closed\ndata: {}\n\n")
            self.wfile.flush()
        except (BrokenPipeError, ConnectionResetError):
            return
