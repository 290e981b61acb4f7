"""``otel-bridge view PATH``: show a run, a graph.json, a review or a comparison in the browser."""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import threading
import webbrowser
from typing import Any

from otel_bridge.errors import OtelBridgeError
from otel_bridge.store.options import add_db_options, required_file, stored_run_dir
from otel_bridge.viewer import Bundle, TraceLink, load_bundle, render
from otel_bridge.viewer.server import BundleState, ViewServer


def register(subparsers: Any) -> None:
    """Add the ``view`` subcommand."""
    p: argparse.ArgumentParser = subparsers.add_parser(
        "view",
        help="show a run, graph.json, review.json or compare.json in the browser",
        description=(
            "Serve a local page (127.0.0.1 only) that shows the evidence graph, a table of the "
            "same data, the timeline, and the review and comparison when present; or, with "
            "--export, write the page as one self-contained HTML file (data and code inline, "
            "no network access when opened)."
        ),
    )
    p.add_argument(
        "path",
        metavar="PATH",
        nargs="?",
        help="run directory, graph.json, review.json or compare.json (or --db)",
    )
    p.add_argument("--port", type=int, default=0, help="port on 127.0.0.1 (default: a free one)")
    p.add_argument("--open", action="store_true", help="open the page in a browser")
    p.add_argument("--export", metavar="FILE", help="write one self-contained HTML file and exit")
    p.add_argument(
        "--trace-link",
        action="append",
        default=[],
        metavar="NAME=URL",
        help="link trace ids to a backend, {trace_id} and {span_id} substituted "
        "(e.g. jaeger=http://127.0.0.1:16686/trace/{trace_id}); repeatable",
    )
    add_db_options(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Execute the command."""
    links = [TraceLink.parse(t) for t in args.trace_link]
    if args.db:  # the stored run, written as a private temporary run directory
        with tempfile.TemporaryDirectory(prefix="otel-bridge-view-") as tmp:
            args.path = stored_run_dir(args, os.path.join(tmp, "run"))
            return _show(load_bundle(args.path, links), args)
    return _show(load_bundle(required_file(args, "PATH", "path"), links), args)


def _show(bundle: Bundle, args: argparse.Namespace) -> int:
    if args.export:
        text = render(bundle, title=f"otel-bridge view: {os.path.basename(args.path.rstrip('/'))}")
        _write_private(args.export, text.encode("utf-8"))
        print(f"wrote {args.export}")
        return 0
    return serve(bundle, port=args.port, open_browser=args.open)


def _write_private(path: str, data: bytes) -> None:
    # The page holds the run's command lines and paths: owner-only, like the run directory.
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as fh:
        fh.write(data)
    os.chmod(path, 0o600)


def serve(bundle: Bundle, *, port: int, open_browser: bool) -> int:
    """Serve ``bundle`` until interrupted."""
    try:
        server = ViewServer(BundleState(bundle), port)
    except OSError as exc:
        raise OtelBridgeError(f"view: cannot listen on 127.0.0.1:{port}: {exc.strerror}") from exc
    print(f"otel-bridge view: serving {bundle.source} at {server.url} (Ctrl-C stops)", flush=True)
    if open_browser:
        threading.Thread(target=webbrowser.open, args=(server.url,), daemon=True).start()
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.state.close()
        server.server_close()
    sys.stdout.flush()
    return 0
