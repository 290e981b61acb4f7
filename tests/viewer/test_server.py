"""The viewer's server, export and data loading, without a browser: real HTTP on loopback."""

from __future__ import annotations

import hashlib
import http.client
import json
import re
import signal
import stat
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from otel_bridge.errors import OtelBridgeError
from otel_bridge.viewer import Bundle, TraceLink, columns, load_bundle, render
from otel_bridge.viewer.server import BundleState, ViewServer
from viewer.viewer_support import edge, graph_doc, node

VENDOR = Path(__file__).resolve().parents[2] / "otel_bridge" / "viewer" / "static" / "vendor"
HOSTILE = "</script><script>window.pwned=1</script>"


def small_graph() -> dict[str, Any]:
    """An agent, a tool call, its process and a file; the process label is hostile markup."""
    tool = "tool_call:t1:s1"
    proc = "process:h:10:1000"
    return graph_doc(
        [
            node("agent:svc:a", "agent", "a", channels=["sem"], backends=["otlp"]),
            node(tool, "tool_call", "run_command", channels=["sem"], backends=["otlp"]),
            node(proc, "process", HOSTILE),
            node("file:/work/out.txt", "file", "/work/out.txt"),
        ],
        [
            edge("e-1", "agent:svc:a", "invoked", tool, channels=["sem"], grade="U", causal=None),
            edge("e-2", proc, "wrote", "file:/work/out.txt"),
            edge(
                "e-3",
                tool,
                "correlated_with_process",
                proc,
                channels=["sem"],
                backends=["correlate"],
                causal=False,
                identity_exact=True,
                inferred=False,
                attribution=["exact_identity"],
                method="traceparent",
                grade="C",
            ),
        ],
    )


@pytest.fixture
def graph_file(tmp_path: Path) -> Path:
    path = tmp_path / "graph.json"
    path.write_text(json.dumps(small_graph()))
    return path


@pytest.fixture
def server(graph_file: Path) -> Iterator[ViewServer]:
    srv = ViewServer(BundleState(load_bundle(graph_file)))
    srv.start()
    yield srv
    srv.stop()


def get(srv: ViewServer, path: str, host: str | None = None) -> tuple[int, dict[str, str], bytes]:
    port = srv.server_address[1]
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    conn.request("GET", path, headers={"Host": host or f"127.0.0.1:{port}"})
    resp = conn.getresponse()
    body = resp.read()
    conn.close()
    return resp.status, {k.lower(): v for k, v in resp.getheaders()}, body


def test_serves_page_assets_and_data_on_loopback(server: ViewServer, graph_file: Path) -> None:
    """Loopback only; the page, its shipped scripts and the bundle, under a same-origin CSP."""
    assert server.server_address[0] == "127.0.0.1"
    status, headers, body = get(server, "/")
    assert status == 200
    assert "script-src 'self'" in headers["content-security-policy"]
    page = body.decode()
    for script in (
        "assets/vendor/graphology.min.js",
        "assets/vendor/sigma.min.js",
        "assets/viewer.js",
    ):
        assert f'src="{script}"' in page
    assert "http://" not in page
    assert "https://" not in page
    status, headers, body = get(server, "/assets/vendor/sigma.min.js")
    assert status == 200
    assert headers["content-type"] == "text/javascript"
    assert body == (VENDOR / "sigma.min.js").read_bytes()
    status, _, body = get(server, "/data.json")
    bundle = json.loads(body)
    assert bundle["format"] == "otel-bridge.view"
    assert "graph" not in bundle  # the page gets the graph in columns
    assert columns.unpack(bundle["graph_columns"]) == json.loads(graph_file.read_text())


@pytest.mark.parametrize(
    "path",
    ["/assets/../data.py", "/assets/data.py", "/assets/%2e%2e/page.py", "/nothing", "/run/x/"],
)
def test_unknown_paths_are_not_found(server: ViewServer, path: str) -> None:
    """Only shipped assets are served: no traversal, no arbitrary file, no unlisted run."""
    status, _, _ = get(server, path)
    assert status == 404


def test_foreign_host_header_is_refused(server: ViewServer) -> None:
    """A request naming another host (DNS rebinding) gets 403, not the run's data."""
    status, _, body = get(server, "/data.json", host="evil.example:80")
    assert status == 403
    assert b"nodes" not in body


def test_event_stream_announces_each_new_version(server: ViewServer) -> None:
    """/events sends the current version, then one event per update of the bundle."""
    port = server.server_address[1]
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    conn.request("GET", "/events", headers={"Host": f"127.0.0.1:{port}"})
    resp = conn.getresponse()
    assert resp.getheader("Content-Type") == "text/event-stream"

    def read_event() -> str:
        lines = []
        while (line := resp.fp.readline().decode()) != "\n":
            lines.append(line.strip())
        return " ".join(lines)

    assert read_event() == "event: bundle data: 1"
    server.state.update(lambda b: setattr(b, "ended", False))
    assert read_event() == "event: bundle data: 2"
    server.state.close()
    assert read_event().startswith("event: closed")
    conn.close()


def test_export_is_self_contained_private_and_escaped(tmp_path: Path, graph_file: Path) -> None:
    """One file: code and data inline, a CSP forbidding every request, mode 0600."""
    out = tmp_path / "report.html"
    proc = subprocess.run(
        [sys.executable, "-m", "otel_bridge", "view", str(graph_file), "--export", str(out)],
        capture_output=True,
        text=True,
        check=True,
    )
    assert str(out) in proc.stdout
    assert stat.S_IMODE(out.stat().st_mode) == 0o600
    text = out.read_text()
    assert "connect-src 'none'" in text
    assert "default-src 'none'" in text
    assert not re.search(r"<script[^>]+src=", text)
    assert "<link" not in text
    assert HOSTILE not in text  # the label is inlined escaped, never as markup
    match = re.search(r'<script type="application/json" id="ob-bundle">(.*?)</script>', text, re.S)
    assert match is not None
    inline = json.loads(match.group(1))["graph_columns"]
    assert columns.unpack(inline) == json.loads(graph_file.read_text())
    assert (VENDOR / "sigma.min.js").read_text() in text


def test_bundle_kinds_by_path(tmp_path: Path, graph_file: Path) -> None:
    """A run directory, a graph.json, a review.json beside a graph, a compare.json."""
    run = graph_file.parent
    (run / "review.json").write_text(json.dumps({"format": "otel-bridge.review", "claims": []}))
    from_dir = load_bundle(run)
    assert from_dir.graph is not None
    assert from_dir.review is not None
    from_review = load_bundle(run / "review.json")
    assert from_review.review is not None
    assert from_review.graph == from_dir.graph
    compare = tmp_path / "compare.json"
    compare.write_text(
        json.dumps({"format": "otel-bridge.compare", "runs": [{"id": "r1", "path": str(run)}]})
    )
    bundle = load_bundle(compare)
    assert bundle.graph is None
    assert bundle.compare_run_path("r1") == str(run)
    assert bundle.compare_run_path("r2") is None


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("{}", "neither"),
        ("not json", "not JSON"),
        ('{"format": "otel-bridge.graph"}', "not a valid"),
    ],
)
def test_bad_inputs_are_user_errors(tmp_path: Path, content: str, message: str) -> None:
    path = tmp_path / "x.json"
    path.write_text(content)
    with pytest.raises(OtelBridgeError, match=message):
        load_bundle(path)
    with pytest.raises(OtelBridgeError, match=r"has no graph\.json"):
        load_bundle(tmp_path)


def test_trace_link_needs_a_trace_id_placeholder() -> None:
    assert TraceLink.parse("jaeger=http://127.0.0.1:16686/trace/{trace_id}").name == "jaeger"
    with pytest.raises(OtelBridgeError):
        TraceLink.parse("jaeger=http://127.0.0.1:16686/")


def test_compare_click_through_serves_only_listed_runs(tmp_path: Path, graph_file: Path) -> None:
    """/run/<id>/data.json is the graph of a run compare.json lists; other ids are 404."""
    compare = {
        "format": "otel-bridge.compare",
        "runs": [{"id": "r1", "path": str(graph_file.parent)}],
    }
    srv = ViewServer(BundleState(Bundle(source="c", compare=compare)))
    srv.start()
    try:
        status, _, body = get(srv, "/run/r1/data.json")
        assert status == 200
        assert columns.unpack(json.loads(body)["graph_columns"])["nodes"]
        assert get(srv, "/run/r1/assets/viewer.js")[0] == 200
        assert get(srv, "/run/r9/data.json")[0] == 404
    finally:
        srv.stop()


def test_vendored_files_match_their_record() -> None:
    """VERSIONS.json names each vendored file's SHA-256, version and licence."""
    record = json.loads((VENDOR / "VERSIONS.json").read_text())
    assert set(record) == {"sigma", "graphology"}
    for name, info in record.items():
        assert info["license"] == "MIT"
        assert info["version"]
        assert f"LICENSE-{name}.txt" in info["files"]
        for file, digest in info["files"].items():
            assert hashlib.sha256((VENDOR / file).read_bytes()).hexdigest() == digest


def test_view_command_serves_until_interrupted(graph_file: Path) -> None:
    """``otel-bridge view`` prints a loopback URL with a free port, serves, exits 0 on SIGINT."""
    with subprocess.Popen(
        [sys.executable, "-m", "otel_bridge", "view", str(graph_file)],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    ) as proc:
        try:
            assert proc.stdout is not None
            line = proc.stdout.readline()
            match = re.search(r"http://127\.0\.0\.1:(\d+)/", line)
            assert match, line
            conn = http.client.HTTPConnection("127.0.0.1", int(match.group(1)), timeout=10)
            conn.request("GET", "/data.json")
            assert columns.unpack(json.loads(conn.getresponse().read())["graph_columns"])["nodes"]
            conn.close()
            proc.send_signal(signal.SIGINT)
            assert proc.wait(timeout=20) == 0
        finally:
            if proc.poll() is None:
                proc.kill()


def test_render_served_page_has_no_bundle() -> None:
    """The served page fetches data.json; only the export inlines a bundle."""
    assert 'id="ob-bundle"' not in render(None)
    assert 'id="ob-bundle"' in render(Bundle(source="x", graph=small_graph()))


def test_readme_shows_a_viewer_screenshot() -> None:
    """The README's viewer section shows a real PNG screenshot from docs/images/."""
    repo = VENDOR.parents[3]
    images = re.findall(
        r"!\[[^\]]*\]\((docs/images/viewer[^)]*\.png)\)", (repo / "README.md").read_text()
    )
    assert images
    for image in images:
        data = (repo / image).read_bytes()
        assert data.startswith(b"\x89PNG\r\n\x1a\n")
        assert len(data) > 20_000


def test_the_directory_compare_or_review_wrote_is_viewed(tmp_path: Path, graph_file: Path) -> None:
    """``compare A B -o cmp`` then ``view cmp``: a new user's next command was refused with
    "cmp has no graph.json"; the directory's compare.json (or review.json) is shown."""
    run = graph_file.parent
    cmp_dir = tmp_path / "cmp"
    cmp_dir.mkdir()
    (cmp_dir / "compare.json").write_text(
        json.dumps({"format": "otel-bridge.compare", "runs": [{"id": "r1", "path": str(run)}]})
    )
    rev_dir = tmp_path / "rev"
    rev_dir.mkdir()
    (rev_dir / "review.json").write_text(json.dumps({"format": "otel-bridge.review"}))
    for directory in (cmp_dir, rev_dir):
        out = tmp_path / f"{directory.name}.html"
        done = subprocess.run(
            [sys.executable, "-m", "otel_bridge", "view", str(directory), "--export", str(out)],
            capture_output=True,
            text=True,
            check=False,
        )
        assert done.returncode == 0, done.stderr
        assert out.stat().st_size > 0
    assert load_bundle(cmp_dir).compare is not None
    assert load_bundle(rev_dir).review is not None
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(OtelBridgeError, match=r"has no graph\.json, review\.json or compare"):
        load_bundle(empty)
