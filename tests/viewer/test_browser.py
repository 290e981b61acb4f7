"""The viewer in a real headless Chromium: served and exported pages of real and fixture data."""

from __future__ import annotations

import contextlib
import itertools
import json
import math
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from otel_bridge.viewer import Bundle, load_bundle
from otel_bridge.viewer.server import BundleState, ViewServer
from viewer.fixtures import DETOUR_RUN, PLOT, compare_doc, review_doc
from viewer.viewer_support import edge, graph_doc, node, screenshot, wait_ready

pytestmark = pytest.mark.slow
REPO = Path(__file__).resolve().parents[2]


def export(path: Path, out: Path) -> Path:
    """``otel-bridge view PATH --export OUT`` as a user runs it."""
    subprocess.run(
        [sys.executable, "-m", "otel_bridge", "view", str(path), "--export", str(out)],
        check=True,
        capture_output=True,
    )
    return out


@contextlib.contextmanager
def serve(bundle: Bundle) -> Iterator[ViewServer]:
    server = ViewServer(BundleState(bundle))
    server.start()
    try:
        yield server
    finally:
        server.stop()


def check_table_matches_graph(page: Any, graph: dict[str, Any]) -> None:
    """The table lists every graph.json node, less the folded ones, which the fold rows count."""
    page.evaluate("obViewer.show('table')")
    rows = page.eval_on_selector_all(
        "#ob-node-table tbody tr",
        "rs => rs.map(r => [r.dataset.id, r.dataset.kind, Number(r.dataset.count || 0)])",
    )
    folds = page.evaluate("obViewer.state.model.folds")
    graph_ids = {n["id"] for n in graph["nodes"]}
    kinds = {n["id"]: n["kind"] for n in graph["nodes"]}
    listed = {r[0] for r in rows if r[1] != "folded"}
    folded = {m for f in folds.values() for m in f["members"]}
    assert listed | folded == graph_ids
    assert not listed & folded
    assert sum(r[2] for r in rows if r[1] == "folded") == len(folded)
    assert {kinds[m] for m in folded} <= {"file"}
    assert len(rows) == len(listed) + len(folds)
    check_records_match_graph(page, graph)
    check_layouts_agree(page)


def check_layouts_agree(page: Any) -> None:
    """The positions computed in Python are used, and are exactly the page's own layout's."""
    layouts = page.evaluate("obViewer.layouts()")
    assert layouts["given"] is True
    assert layouts["used"] == layouts["own"]
    assert layouts["bands"] == layouts["ownBands"]
    assert layouts["usedCurves"] == layouts["ownCurves"]


def _layout_graph() -> dict[str, Any]:
    """Every lane, folds, ties and missing times, files ordered under their processes."""
    nodes = [node("agent:svc:a", "agent", "a", channels=["sem"], first_seen=5)]
    edges = []
    for p in range(70):
        pid, tid = f"process:h:{p}:{p}", f"tool_call:t:{p}"
        seen = 1_796_000_000_000_000_000 + (p % 7) * 100  # beyond 2**53: ties as doubles
        nodes.append(node(tid, "tool_call", "run", channels=["sem"], first_seen=seen))
        nodes.append(
            node(pid, "process", f"p{p}", channels=["os"], first_seen=seen if p % 5 else 0)
        )
        edges.append(edge(f"c{p}", tid, "correlated_with_process", pid, channels=["sem"]))
        for f in range(p % 4):
            fid = f"file:/usr/lib/x{p}-{f}.so" if f % 2 else f"file:/work/out{p}-{f}.txt"
            nodes.append(node(fid, "file", fid[5:], channels=["os"], first_seen=100 - p))
            edges.append(edge(f"r{p}-{f}", pid, "read" if f % 2 else "wrote", fid, channels=["os"]))
        edges.append(edge(f"x{p}", pid, "executed", f"executable:/bin/t{p % 3}", channels=["os"]))
    nodes += [
        node(f"executable:/bin/t{x}", "executable", f"t{x}", channels=["os"]) for x in range(3)
    ]
    nodes += [
        node("model:p:m", "model", "m", channels=["sem"]),
        node("endpoint:tcp:1.2.3.4:443", "endpoint", "e", channels=["gw"]),
        node("cgroup:c1", "cgroup", "c", channels=["os"]),
        node("planner:w1", "planner", "plan", channels=["sem"]),
    ]
    edges.append(edge("ep", "process:h:3:3", "connected_to", "endpoint:tcp:1.2.3.4:443"))
    return graph_doc(nodes, edges)


def test_layout_computed_in_python_is_the_pages_own(page: Any, tmp_path: Path) -> None:
    """Differential: the positions the bundle carries equal those the page computes itself."""
    (tmp_path / "graph.json").write_text(json.dumps(_layout_graph()))
    out = export(tmp_path / "graph.json", tmp_path / "r.html")
    page.goto(out.as_uri())
    wait_ready(page)
    assert page.evaluate("Object.keys(obViewer.state.model.folds).length") > 0
    check_layouts_agree(page)


def _as_js(value: Any) -> Any:
    """``value`` as a JavaScript number keeps it: integers beyond 2**53 are doubles there."""
    if isinstance(value, dict):
        return {k: _as_js(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_as_js(v) for v in value]
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) > 2**53:
        return float(value)
    return value


def check_records_match_graph(page: Any, graph: dict[str, Any]) -> None:
    """The page's graph arrives in columns; every record it puts back together is graph.json's."""
    records = page.evaluate("obViewer.records()")
    assert _as_js(records["nodes"]) == _as_js(graph["nodes"])
    assert _as_js(records["edges"]) == _as_js(graph["edges"])


def test_exported_file_of_a_real_run(
    observed_run: Path, page: Any, shots: Path, tmp_path: Path
) -> None:
    """The exported report of a real observe run renders every view with no network request."""
    out = export(observed_run, tmp_path / "report.html")
    requests: list[str] = []
    page.on("request", lambda r: requests.append(r.url))
    page.goto(out.as_uri())
    wait_ready(page)
    assert requests == [out.as_uri()]
    graph = json.loads((observed_run / "graph.json").read_text())
    screenshot(page, shots, "export-graph")
    check_table_matches_graph(page, graph)
    screenshot(page, shots, "export-table")
    page.evaluate("obViewer.show('timeline')")
    outcomes = page.eval_on_selector_all(
        "#ob-timeline-table tbody tr",
        "rs => rs.map(r => r.cells[0].textContent + ' ' + r.cells[4].textContent)",
    )
    assert "process exit 0" in outcomes
    assert any(o.startswith("tool_call") for o in outcomes)
    assert page.locator("#ob-timeline line.tl-link").count() >= 2  # tool call -> process links
    screenshot(page, shots, "export-timeline")
    assert requests == [out.as_uri()]


def test_served_page_of_a_real_run(observed_run: Path, page: Any, shots: Path) -> None:
    """The served page: same table, details of the exact link, filters, all from this server."""
    bundle = load_bundle(observed_run)
    origins: set[str] = set()
    with serve(bundle) as server:
        page.on("request", lambda r: origins.add(r.url.split("/")[2]))
        page.goto(server.url)
        wait_ready(page)
        assert origins == {server.url.split("/")[2]}
        assert bundle.graph is not None
        check_table_matches_graph(page, bundle.graph)
        link = page.locator('#ob-edge-table tr:has(td:text-is("correlated_with_process"))').first
        link.click()
        details = page.locator("#ob-details")
        assert "identity exact" in details.inner_text()
        assert "Supporting records" in details.inner_text()
        assert "grade C" in details.inner_text()
        page.evaluate("obViewer.setFilter('kind', 'file', false)")
        assert page.locator('#ob-node-table tr[data-kind="file"]').count() == 0
        assert page.evaluate("obViewer.lastFilter()") is not None
        page.evaluate("obViewer.show('graph')")
        screenshot(page, shots, "served-graph-files-filtered")


def failing_graph() -> dict[str, Any]:
    """A tool call whose exactly linked process exited 2, and an inferred bridge to another."""
    tool, proc, other = "tool_call:t:s1", "process:h:1:1000", "process:h:2:1000"
    facts = {
        "type": "process",
        "host_id": "h",
        "pid": 1,
        "start_time_ms": 1000,
        "parent_pid": None,
        "parent_start_time_ms": None,
        "executable_path": "/usr/bin/false",
        "executable_name": "false",
        "argv": ["false"],
        "command_line": None,
        "cwd": None,
        "traceparent": None,
        "exit_code": 2,
        "user": None,
    }
    return graph_doc(
        [
            node(
                tool,
                "tool_call",
                "run_command",
                channels=["sem"],
                attrs={"trace_id": "ab" * 16, "span.status": "error"},
            ),
            node(proc, "process", "false (1)", facts=facts, first_seen=1_100_000_000),
            node(other, "process", "sh (2)", facts=None),
        ],
        [
            edge(
                "e-1",
                tool,
                "correlated_with_process",
                proc,
                channels=["sem"],
                causal=False,
                identity_exact=True,
                inferred=False,
                attribution=["exact_identity"],
                grade="C",
            ),
            edge(
                "e-2",
                tool,
                "correlated_with_process",
                other,
                channels=["sem"],
                causal=False,
                inferred=True,
                attribution=["heuristic"],
                method="singleton_bridge",
                score=0.8,
                grade="D",
            ),
        ],
    )


def test_timeline_marks_failures_and_details_show_unknowns(
    page: Any, shots: Path, tmp_path: Path
) -> None:
    """Exit code 2 and an error span are marked; an unread exit code shows as unknown, not 0."""
    (tmp_path / "graph.json").write_text(json.dumps(failing_graph()))
    out = export(tmp_path / "graph.json", tmp_path / "r.html")
    page.goto(out.as_uri())
    wait_ready(page)
    page.evaluate("obViewer.show('timeline')")
    cells = page.eval_on_selector_all(
        "#ob-timeline-table tbody tr",
        "rs => Object.fromEntries(rs.map(r => [r.dataset.id, r.cells[4].textContent]))",
    )
    assert cells["process:h:1:1000"] == "exit 2"
    assert cells["process:h:2:1000"] == "exit ?"
    assert cells["tool_call:t:s1"] == "failed"
    assert page.locator('#ob-timeline line.tl-link[stroke-dasharray="6 4"]').count() == 1
    screenshot(page, shots, "timeline-failure")
    page.evaluate("obViewer.select('e-2')")
    text = page.locator("#ob-details").inner_text()
    assert "inferred" in text
    assert "singleton_bridge" in text
    page.evaluate("obViewer.select('process:h:2:1000')")
    assert "no typed facts stated" in page.locator("#ob-details").inner_text()


def test_trace_links_are_configurable(page: Any, tmp_path: Path) -> None:
    """--trace-link NAME=URL puts a link to the trace id on the details of a node that has one."""
    (tmp_path / "graph.json").write_text(json.dumps(failing_graph()))
    out = tmp_path / "r.html"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "otel_bridge",
            "view",
            str(tmp_path / "graph.json"),
            "--export",
            str(out),
            "--trace-link",
            "jaeger=http://127.0.0.1:16686/trace/{trace_id}",
        ],
        check=True,
        capture_output=True,
    )
    page.goto(out.as_uri())
    wait_ready(page)
    page.evaluate("obViewer.select('tool_call:t:s1')")
    href = page.locator('#ob-details a:text("open in jaeger")').get_attribute("href")
    assert href == "http://127.0.0.1:16686/trace/" + "ab" * 16


def test_keyboard_reaches_tabs_and_table_rows(
    observed_run: Path, page: Any, tmp_path: Path
) -> None:
    """Arrow keys move between tabs; a table row takes focus and Enter opens its details."""
    out = export(observed_run / "graph.json", tmp_path / "r.html")
    page.goto(out.as_uri())
    wait_ready(page)
    page.focus("#tab-graph")
    page.keyboard.press("ArrowRight")
    assert page.get_attribute("#tab-table", "aria-selected") == "true"
    assert page.is_visible("#ob-node-table")
    page.focus("#ob-node-table tbody tr")
    row_id = page.evaluate("document.activeElement.dataset.id")
    page.keyboard.press("Enter")
    assert (
        row_id in page.locator("#ob-details").inner_text()
        or "Folded" in page.locator("#ob-details").inner_text()
    )


def overlapping_review_labels(page: Any) -> list[tuple[str, str]]:
    """Pairs of labels of the review graph whose boxes overlap (they were drawn over each other
    whenever a level had more than a few nodes)."""
    boxes = page.eval_on_selector_all(
        "#ob-review-graph text",
        "ts => ts.map(t => { const b = t.getBBox(); return [t.textContent, b.x, b.y, b.width,"
        " b.height]; })",
    )
    return [
        (a[0], b[0])
        for i, a in enumerate(boxes)
        for b in boxes[i + 1 :]
        if a[1] < b[1] + b[3] and b[1] < a[1] + a[3] and a[2] < b[2] + b[4] and b[2] < a[2] + a[4]
    ]


def test_review_view_highlights_the_support_path(page: Any, shots: Path, tmp_path: Path) -> None:
    """Findings first; selecting the plot claim highlights a path ending at plot.png."""
    (tmp_path / "review.json").write_text(json.dumps(review_doc()))
    out = export(tmp_path / "review.json", tmp_path / "review.html")
    page.goto(out.as_uri())
    wait_ready(page)
    assert page.get_attribute("#tab-review", "aria-selected") == "true"
    claims = page.eval_on_selector_all("#ob-claims button", "bs => bs.map(b => b.dataset.claim)")
    assert claims[0] == "c-tests"  # the claim a finding names comes first
    assert "contradicted_claim" in page.inner_text("#ob-findings")
    page.click('button[data-claim="c-plot"]')
    path = page.eval_on_selector_all("#ob-review-path li", "ls => ls.map(l => l.dataset.id)")
    assert path[0] == "w:claim"
    assert path[-1] == PLOT
    assert page.locator(f'#ob-review-graph g.highlighted[data-id="{PLOT}"]').count() == 1
    assert page.locator('#ob-review-graph g.highlighted[data-id="process:h:3:4"]').count() == 0
    text = page.inner_text("#view-review")
    assert "ab" * 32 in text  # the artifact's hash
    assert "n=3" in text  # captured content
    assert "model:scripted" in page.inner_text("#ob-audit")
    assert overlapping_review_labels(page) == []
    screenshot(page, shots, "review")


def test_review_view_says_when_there_is_no_claim(page: Any, tmp_path: Path) -> None:
    """A session that stated no claim showed an empty Claims heading; it now says none, and why
    when review.json's session says (``no_claims``)."""
    doc = {**review_doc(), "claims": []}
    (tmp_path / "review.json").write_text(json.dumps(doc))
    page.goto(export(tmp_path / "review.json", tmp_path / "review.html").as_uri())
    wait_ready(page)
    assert page.locator("#ob-claims button").count() == 0
    assert page.inner_text("#ob-claims-none").startswith("None: the agent stated no claim")
    doc["sessions"] = [{"id": "s1", "no_claims": "no assistant text reached it"}]
    (tmp_path / "review.json").write_text(json.dumps(doc))
    page.goto(export(tmp_path / "review.json", tmp_path / "review2.html").as_uri())
    wait_ready(page)
    assert page.inner_text("#ob-claims-none").startswith("None: no assistant text reached it (")
    assert "contradicted_claim" in page.inner_text("#ob-findings")


def test_compare_view_supports_and_click_through(page: Any, shots: Path, tmp_path: Path) -> None:
    """The detour one run of five took has support 1, the common path 5; the slider hides it."""
    run = tmp_path / "r1"
    run.mkdir()
    (run / "graph.json").write_text(json.dumps(failing_graph()))
    doc = compare_doc({"r1": str(run)})
    with serve(Bundle(source="compare.json", compare=doc)) as server:
        page.goto(server.url)
        wait_ready(page)
        support = page.eval_on_selector_all(
            "#ob-joined g.jn",
            "gs => Object.fromEntries(gs.map(g => [g.dataset.id, g.dataset.support]))",
        )
        assert support == {"j:read": "5", "j:write": "5", "j:test": "5", "j:search": "1"}
        assert "detour" in (page.get_attribute('#ob-joined g[data-id="j:search"]', "class") or "")
        assert "motif" in (page.get_attribute('#ob-joined g[data-id="j:read"]', "class") or "")
        assert page.locator(f'#ob-upset th:text-is("{DETOUR_RUN}")').count() == 1
        # no graph, so no filters: the view has their column too (it was squeezed into the
        # filters' 15rem, its tables cut off, beside an empty details pane of 1fr)
        width = "e => e.getBoundingClientRect().width"
        assert page.eval_on_selector("main", width) > 2 * page.eval_on_selector(
            "#ob-details", width
        )
        screenshot(page, shots, "compare")
        page.fill("#ob-support", "2")
        page.dispatch_event("#ob-support", "input")
        assert page.locator('#ob-joined g[data-id="j:search"]').count() == 0
        assert page.locator('#ob-joined g[data-id="j:read"]').count() == 1
        page.click('a[data-run="r1"]')
        wait_ready(page)
        assert page.url == server.url + "run/r1/"
        page.evaluate("obViewer.show('table')")
        assert page.locator('#ob-node-table tr[data-id="process:h:1:1000"]').count() == 1


def test_review_view_of_a_real_session_follows_the_ground_truth(
    reviewed_session: tuple[Path, Path], page: Any, shots: Path, tmp_path: Path
) -> None:
    """The review.json a real observe wrote: a claim naming one file highlights a path from the
    claim's step through the tool call that wrote it to that file, the artifact the truth names."""
    run, work = reviewed_session
    review = json.loads((run / "review.json").read_text())
    if not review["run"]["coverage"]["files_available"]:
        pytest.skip("the OS plane could not watch files here (fanotify needs root)")
    truth = json.loads((REPO / "examples/review/analysis.truth.json").read_text())
    named = [
        (c["text"], files[0])
        for c in truth["sessions"]["analysis"]["claims"]
        if c["status"] == "supported"
        and len(files := re.findall(r"\b[\w-]+\.(?:md|csv|svg|py)\b", c["text"])) == 1
    ]
    assert named, "the truth names a supported claim about one file"
    out = export(run, tmp_path / "review.html")
    page.goto(out.as_uri())
    wait_ready(page)
    page.evaluate("obViewer.show('review')")
    assert overlapping_review_labels(page) == []
    for text, name in named:
        claim = next(c for c in review["claims"] if c["text"] == text)
        page.click(f'button[data-claim="{claim["id"]}"]')
        path = page.eval_on_selector_all("#ob-review-path li", "ls => ls.map(l => l.dataset.id)")
        artifact = f"file:{work / name}"
        assert path[-1] == artifact
        assert path[0].startswith("workflow:")  # the step holding the claim
        assert any(p.startswith("tool_call:") for p in path)  # the call that wrote the file
        assert page.locator(f'#ob-review-graph g.highlighted[data-id="{artifact}"]').count() == 1
    assert "not captured" in page.inner_text("#view-review")  # content is not captured
    assert "rules: " in page.inner_text("#ob-audit")  # workflow steps name their rules
    screenshot(page, shots, "review-real-session")


def color(page: Any, node_id: str) -> str:
    """The colour the page draws a node in, whichever renderer draws it."""
    return str(page.evaluate(f"obViewer.display('{node_id}').color"))


def test_unknown_kinds_are_drawn_neutral_with_a_legend_entry(
    page: Any, shots: Path, tmp_path: Path
) -> None:
    """Kinds this page has no style for (another layer's, a newer graph.json) still render."""
    kinds = {"planner:w1": "planner", "moderation:g1": "moderation", "cgroup:c1": "cgroup"}
    doc = graph_doc(
        [
            node("agent:svc:a", "agent", "a", channels=["sem"]),
            node("planner:w1", "planner", "plan", channels=["sem"]),
            node("moderation:g1", "moderation", "pii check", channels=["sem"]),
            node("cgroup:c1", "cgroup", "/sys/fs/cgroup/x", channels=["os"]),
            node("workflow:wf", "workflow", "nightly", channels=["sem"]),
        ],
        [
            edge("e-1", "agent:svc:a", "ran", "planner:w1", channels=["sem"]),
            edge("e-2", "planner:w1", "checked_by", "moderation:g1", channels=["sem"]),
        ],
    )
    (tmp_path / "graph.json").write_text(json.dumps(doc))
    out = export(tmp_path / "graph.json", tmp_path / "r.html")
    page.goto(out.as_uri())
    wait_ready(page)
    neutral = color(page, "planner:w1")
    known = color(page, "agent:svc:a")
    assert neutral != known
    for node_id, kind in kinds.items():
        assert color(page, node_id) == neutral
        entry = page.locator(f'#ob-legend [data-kind="{kind}"]')
        assert "kind without a style" in entry.inner_text()
    lanes = page.evaluate("obViewer.state.laneBands.filter(b => b.n).map(b => b.name)")
    assert "other OS kinds" in lanes  # the OS-only unknown kind sits below the OS lanes
    assert "spans and other semantic kinds" in lanes
    typed = color(page, "workflow:wf")
    assert typed not in (neutral, known)  # a typed operation (docs/graph.md) has its own style
    assert (
        "kind without a style" not in page.locator('#ob-legend [data-kind="workflow"]').inner_text()
    )
    screenshot(page, shots, "unknown-kinds")
    page.evaluate("obViewer.show('table')")
    assert set(page.evaluate("obViewer.tableIds()")) == {n["id"] for n in doc["nodes"]}
    page.evaluate("obViewer.select('moderation:g1')")
    assert "pii check" in page.inner_text("#ob-details")


def test_tables_are_named_and_reachable_by_keyboard_alone(
    observed_run: Path, page: Any, tmp_path: Path
) -> None:
    """Tab order reaches the view tabs, then each table's sort buttons and rows; every table has
    an accessible name (its caption) and column headers."""
    out = export(observed_run, tmp_path / "r.html")
    page.goto(out.as_uri())
    wait_ready(page)
    for view, table in (
        ("table", "ob-node-table"),
        ("table", "ob-edge-table"),
        ("timeline", "ob-timeline-table"),
    ):
        page.evaluate(f"obViewer.show('{view}')")
        caption = page.inner_text(f"#{table} caption")
        assert page.get_by_role("table", name=caption).count() == 1
        headers = page.eval_on_selector_all(f"#{table} thead th", "hs => hs.map(h => h.scope)")
        assert headers
        assert set(headers) == {"col"}
    page.evaluate("obViewer.show('graph')")
    page.focus("#tab-graph")
    page.keyboard.press("ArrowRight")  # to the Table tab, which shows its panel
    reached: list[str] = []
    for _ in range(60):
        page.keyboard.press("Tab")
        reached.append(
            page.evaluate(
                "document.activeElement.closest('tr[data-id]') ? 'row' : "
                "document.activeElement.tagName"
            )
        )
        if reached[-1] == "row":
            break
    assert reached[-1] == "row", reached
    page.keyboard.press("Enter")
    assert page.evaluate("document.activeElement.id") == "ob-details"


HIDDEN = """() => {
  const r = obViewer.state.renderer, out = {};
  obViewer.state.graph.forEachNode(id => { out[id] = r.getNodeDisplayData(id).hidden; });
  obViewer.state.graph.forEachEdge(id => { out[id] = r.getEdgeDisplayData(id).hidden; });
  return out;
}"""


def test_filter_changes_redraw_exactly_what_a_full_redraw_would(
    observed_run: Path, page: Any, tmp_path: Path
) -> None:
    """With sigma (WebGL forced: here it runs on SwiftShader), a filter change re-reduces only the
    changed items; what sigma then holds for every node and edge equals what a full refresh
    computes, through hide, show, and a change made while the graph was not the shown view."""
    out = export(observed_run, tmp_path / "r.html")
    page.goto(out.as_uri() + "?renderer=webgl")
    wait_ready(page)
    assert page.evaluate("obViewer.renderer().kind") == "webgl"

    def check() -> dict[str, bool]:
        partial = page.evaluate(HIDDEN)
        page.evaluate("obViewer.state.renderer.refresh()")
        assert page.evaluate(HIDDEN) == partial
        return dict(partial)

    before = check()
    page.evaluate("obViewer.setFilter('kind', 'file', false)")
    hidden = check()
    files = [
        n
        for n, k in page.evaluate("obViewer.state.model.nodes.map(n => [n.id, n.kind])")
        if k == "file"
    ]
    assert files
    assert all(hidden[f] for f in files)
    page.evaluate("obViewer.setFilter('kind', 'file', true)")
    assert check() == before
    page.evaluate("obViewer.show('table')")
    page.evaluate("obViewer.setFilter('kind', 'process', false)")
    page.evaluate("obViewer.show('graph')")
    assert check() != before
    page.evaluate("obViewer.setFilter('kind', 'process', true)")
    assert check() == before


def test_software_webgl_is_drawn_by_the_canvas_renderer(
    observed_run: Path, page: Any, tmp_path: Path
) -> None:
    """SwiftShader's WebGL (no GPU here) is detected and the graph is drawn on a 2D canvas; the
    served page and the exported file draw the same graph, and ?renderer=webgl still gets sigma."""
    out = export(observed_run, tmp_path / "r.html")
    page.goto(out.as_uri())
    wait_ready(page)
    chosen = page.evaluate("obViewer.renderer()")
    assert chosen["kind"] == "canvas"
    assert "SwiftShader" in chosen["gl"]
    assert "Canvas 2D: WebGL here runs in software" in page.inner_text("#ob-renderer")
    exported = page.evaluate("obViewer.frame()")
    assert set(exported["nodes"]) == set(page.evaluate("obViewer.nodeIds()"))
    # every label is drawn whole inside the canvas (the rightmost nodes' ran past its edge)
    width = page.evaluate("document.getElementById('ob-graph').clientWidth")
    assert exported["labels"]
    assert [x for x in exported["labels"] if not 0 <= x[1] <= x[2] <= width] == []
    # the canvas path never evaluates the vendored WebGL libraries the file carries
    assert page.evaluate("typeof Sigma + ' ' + typeof graphology") == "undefined undefined"
    assert page.locator('script[type="text/x-ob-library"]').count() == 2
    with serve(load_bundle(observed_run)) as server:
        page.goto(server.url)
        wait_ready(page)
        assert page.evaluate("obViewer.renderer().kind") == "canvas"
        assert page.evaluate("obViewer.frame()") == exported
    page.goto(out.as_uri() + "?renderer=webgl")
    wait_ready(page)
    assert page.evaluate("obViewer.renderer().kind") == "webgl"
    assert page.evaluate("typeof Sigma + ' ' + typeof graphology") == "function function"
    assert page.locator("#ob-graph canvas").count() > 1  # sigma's layers
    assert page.inner_text("#ob-renderer") == "drawn with WebGL"


def shown_solid_edges(page: Any) -> set[str]:
    """The edges the filters leave that the canvas layer draws (dashed and dotted ones are the
    overlay's)."""
    return set(
        page.evaluate(
            "obViewer.state.model.edges.filter(e => obViewer.state.edgeVis.has(e.id) && "
            "e.style === 'solid').map(e => e.id)"
        )
    )


def test_canvas_frame_draws_exactly_what_the_filters_leave(
    observed_run: Path, page: Any, tmp_path: Path
) -> None:
    """Each canvas frame draws every node and solid edge the filters and search leave, and
    nothing else, through hide, show, search, and a change made while another view was shown."""
    out = export(observed_run, tmp_path / "r.html")
    page.goto(out.as_uri())
    wait_ready(page)

    def check() -> tuple[set[str], set[str]]:
        frame = page.evaluate("obViewer.frame()")
        visible = set(
            page.evaluate("obViewer.nodeIds().filter(id => obViewer.state.nodeVis.has(id))")
        )
        assert set(frame["nodes"]) == visible
        assert set(frame["edges"]) == shown_solid_edges(page)
        return set(frame["nodes"]), set(frame["edges"])

    before = check()
    page.evaluate("obViewer.setFilter('kind', 'file', false)")
    nodes, edges = check()
    kinds = dict(page.evaluate("obViewer.state.model.nodes.map(n => [n.id, n.kind])"))
    assert any(k == "file" for k in kinds.values())
    assert not any(kinds[n] == "file" for n in nodes)
    assert edges < before[1]
    page.evaluate("obViewer.setFilter('kind', 'file', true)")
    assert check() == before
    page.evaluate("obViewer.show('table')")
    page.evaluate("obViewer.setFilter('kind', 'process', false)")
    page.evaluate("obViewer.show('graph')")
    assert check() != before
    page.evaluate("obViewer.setFilter('kind', 'process', true)")
    assert check() == before
    page.evaluate("obViewer.search('process')")
    matched = page.evaluate("[...obViewer.state.matches]")
    assert matched
    assert all(page.evaluate(f"obViewer.display({json.dumps(m)}).forceLabel") for m in matched)
    assert check() == before  # search fades the rest; it hides nothing
    page.evaluate("obViewer.search('')")
    folds = page.evaluate("obViewer.state.model.folds")
    assert folds  # the real run reads library files
    process, fold = next(iter(folds.items()))
    page.evaluate(f"obViewer.select({json.dumps(fold['id'])})")
    page.click(f'#ob-details button[data-expand="{process}"]')
    nodes, _ = check()
    assert set(fold["members"]) <= nodes
    assert fold["id"] not in nodes


def click_at(page: Any, point: dict[str, float]) -> None:
    box = page.locator("#ob-graph").bounding_box()
    page.mouse.click(box["x"] + point["x"], box["y"] + point["y"])


def test_canvas_click_selects_nodes_and_edges_and_the_wheel_zooms(
    page: Any, tmp_path: Path
) -> None:
    """A click on a drawn node or edge opens its details; the wheel zooms about the pointer."""
    tool, proc = "tool_call:t:s1", "process:h:1:1000"
    doc = failing_graph()
    (tmp_path / "graph.json").write_text(json.dumps(doc))
    out = export(tmp_path / "graph.json", tmp_path / "r.html")
    page.goto(out.as_uri())
    wait_ready(page)
    assert page.evaluate("obViewer.renderer().kind") == "canvas"
    click_at(page, page.evaluate(f"obViewer.viewportOf('{proc}')"))
    assert "false (1)" in page.inner_text("#ob-details")
    a = page.evaluate(f"obViewer.viewportOf('{tool}')")
    b = page.evaluate(f"obViewer.viewportOf('{proc}')")
    # a point on the exact link (solid), a third of the way, off the grade letter at its middle
    click_at(page, {"x": a["x"] + (b["x"] - a["x"]) / 3, "y": a["y"] + (b["y"] - a["y"]) / 3})
    details = page.inner_text("#ob-details")
    assert "correlated_with_process" in details
    assert "identity exact" in details
    box = page.locator("#ob-graph").bounding_box()
    page.mouse.move(box["x"] + b["x"], box["y"] + b["y"])
    page.mouse.wheel(0, -300)
    apart = ((a["x"] - b["x"]) ** 2 + (a["y"] - b["y"]) ** 2) ** 0.5
    page.wait_for_function(
        f"() => {{ const a = obViewer.viewportOf('{tool}'), b = obViewer.viewportOf('{proc}');"
        f" return Math.hypot(a.x - b.x, a.y - b.y) > {apart * 1.5}; }}"
    )
    after = page.evaluate(f"obViewer.viewportOf('{proc}')")
    assert abs(after["x"] - b["x"]) < 2
    assert abs(after["y"] - b["y"]) < 2  # the point under the pointer stays put


def test_an_edge_is_curved_around_a_node_it_would_cross(
    page: Any, shots: Path, tmp_path: Path
) -> None:
    """One agent, one tool call, one model: the agent->model edge would run through the tool
    call; it is drawn as a curve (by the overlay), with the page's layout equal to Python's."""
    from viewer.test_layout_lines import agent_run

    (tmp_path / "graph.json").write_text(json.dumps(agent_run(1)))
    out = export(tmp_path / "graph.json", tmp_path / "r.html")
    page.goto(out.as_uri())
    wait_ready(page)
    check_layouts_agree(page)
    curved = page.evaluate("obViewer.layouts().usedCurves.map(c => [c[1], c[2]])")
    assert ["agent:s:a0", "model:p:m"] in curved
    drawn = set(page.evaluate("obViewer.frame().edges"))
    assert {"req0", "inv0-0"} <= drawn  # the canvas draws solid edges, curved or straight
    screenshot(page, shots, "graph-curved-edges")


# Every drawn edge (line, curve sampled at 64 points, corridor) against every node that is not
# one of its ends, in CSS pixels of the page as drawn: a node's box is its drawn radius, but no
# more than 0.45 of the distance to its nearest neighbour in its row (a row of 60 tool calls
# fitted to the page overlaps itself; an edge must keep off each node's own part of the row).
CROSSINGS_JS = """() => {
  const S = obViewer.state, z = S.renderer.camera ? S.renderer.camera.z : 1, rows = {}, at = {};
  for (const n of S.model.nodes) {
    const p = obViewer.viewportOf(n.id);
    at[n.id] = [p.x, p.y, obViewer.display(n.id).size * Math.sqrt(z)];
    (rows[n.y] = rows[n.y] || []).push(p.x);
  }
  for (const n of S.model.nodes) {
    const xs = rows[n.y], x = at[n.id][0];
    let gap = Infinity;
    for (const o of xs) if (o !== x) gap = Math.min(gap, Math.abs(o - x));
    at[n.id][2] = Math.min(at[n.id][2], 0.45 * gap);
  }
  const out = [];
  for (const e of S.model.edges) {
    let pts = obViewer.edgePoints(e.id);
    if (e.via) {
      const [a, c, b] = pts;
      pts = [];
      for (let k = 0; k <= 64; k++) {
        const t = k / 64, u = 1 - t;
        pts.push({x: u*u*a.x + 2*t*u*c.x + t*t*b.x, y: u*u*a.y + 2*t*u*c.y + t*t*b.y});
      }
    }
    for (const n of S.model.nodes) {
      if (n.id === e.source || n.id === e.target) continue;
      const [px, py, r] = at[n.id];
      for (let j = 0; j + 1 < pts.length; j++) {
        const a = pts[j], b = pts[j + 1], dx = b.x - a.x, dy = b.y - a.y, l2 = dx*dx + dy*dy;
        const f = l2 ? Math.max(0, Math.min(1, ((px - a.x)*dx + (py - a.y)*dy) / l2)) : 0;
        if (Math.hypot(a.x + f*dx - px, a.y + f*dy - py) < r) { out.push([e.id, n.id]); break; }
      }
    }
  }
  return out;
}"""


@pytest.mark.parametrize("shape", ["files", "tool calls"])
def test_edges_at_wrapped_lanes_keep_off_every_node(
    shape: str, page: Any, shots: Path, tmp_path: Path
) -> None:
    """Lanes of more than 60 nodes wrap into blocks; edges into, across and within them pass
    between their nodes (they were drawn straight through the rows), as Python routes them."""
    from otel_bridge.viewer.layout import layout
    from viewer.test_layout_lines import agent_run, wrapped_run

    doc = wrapped_run(130) if shape == "files" else agent_run(70)
    (tmp_path / "graph.json").write_text(json.dumps(doc))
    out = export(tmp_path / "graph.json", tmp_path / "r.html")
    page.goto(out.as_uri())
    wait_ready(page)
    check_layouts_agree(page)
    lay = page.evaluate("obViewer.layouts()")
    assert lay["usedPaths"] == lay["ownPaths"] == layout(doc, paths=True)["paths"]
    assert any(b["y0"] != b["y1"] for b in lay["bands"] if b["n"] > 60)
    assert page.evaluate(CROSSINGS_JS) == []
    drawn = set(page.evaluate("obViewer.frame().edges"))
    assert {e["id"] for e in doc["edges"] if e["inferred"] is not True} <= drawn
    screenshot(page, shots, f"graph-wrapped-{shape.replace(' ', '-')}")
    # negative control: the same edges drawn straight cross the blocks' rows
    page.evaluate("obViewer.state.model.edges.forEach(e => { e.path = null; })")
    assert page.evaluate(CROSSINGS_JS)


DRAWN_LINES_JS = """() => Object.fromEntries(obViewer.state.model.edges.map(e => {
  let pts = obViewer.edgePoints(e.id);
  if (e.via) {
    const [a, c, b] = pts;
    pts = [];
    for (let k = 0; k <= 32; k++) {
      const t = k / 32, u = 1 - t;
      pts.push({x: u*u*a.x + 2*t*u*c.x + t*t*b.x, y: u*u*a.y + 2*t*u*c.y + t*t*b.y});
    }
  }
  return [e.id, pts.map(p => [p.x, p.y])];
}))"""


def _gap(p: tuple[float, float], line: list[list[float]]) -> float:
    best = math.inf
    for (ax, ay), (bx, by) in itertools.pairwise(line):
        dx, dy = bx - ax, by - ay
        l2 = dx * dx + dy * dy
        u = max(0.0, min(1.0, ((p[0] - ax) * dx + (p[1] - ay) * dy) / l2)) if l2 else 0.0
        best = min(best, math.hypot(ax + u * dx - p[0], ay + u * dy - p[1]))
    return best


def clear_point(page: Any, edge_ids: list[str]) -> tuple[str, dict[str, float]]:
    """The first of these edges with a point, as drawn (curve, corridor or line; CSS pixels of
    the graph view), 8 px or more from every other edge and 12 px from every node: where a click
    means that edge (corridors share their gaps), and that point."""
    lines = page.evaluate(DRAWN_LINES_JS)
    nodes = [
        (p["x"], p["y"])
        for p in page.evaluate("obViewer.nodeIds().map(id => obViewer.viewportOf(id))")
    ]
    for edge_id in edge_ids:
        others = [line for k, line in lines.items() if k != edge_id]
        for (ax, ay), (bx, by) in itertools.pairwise(lines[edge_id]):
            for k in range(1, 20):
                p = (ax + (bx - ax) * k / 20, ay + (by - ay) * k / 20)
                if all(math.hypot(p[0] - x, p[1] - y) >= 12 for x, y in nodes) and all(
                    _gap(p, line) >= 8 for line in others
                ):
                    return edge_id, {"x": p[0], "y": p[1]}
    raise AssertionError(f"{edge_ids}: no point of them is clear of the others")


@pytest.mark.parametrize("renderer", ["canvas", "webgl"])
def test_a_click_on_a_curved_dashed_or_routed_edge_shows_its_details(
    renderer: str, page: Any, tmp_path: Path
) -> None:
    """Curved edges (and dashed ones, and corridors at wrapped lanes) are drawn apart from the
    straight solid ones; a real mouse click on any of them selects it and opens its details."""
    from viewer.test_layout_lines import agent_run

    cases = [
        (agent_run(1), ["req0"], "requested"),  # agent -> model, curved around the tool call
        (failing_graph(), ["e-2"], "singleton_bridge"),  # inferred: dashed
        (agent_run(70), None, "connected_to"),  # across blocks: a corridor
    ]
    for k, (doc, named, shown) in enumerate(cases):
        (tmp_path / f"g{k}.json").write_text(json.dumps(doc))
        out = export(tmp_path / f"g{k}.json", tmp_path / f"r{k}.html")
        page.goto(out.as_uri() + f"?renderer={renderer}")
        wait_ready(page)
        edge_ids = named or page.evaluate(
            f"obViewer.state.model.edges.filter(e => e.path && e.relation === '{shown}')"
            ".map(e => e.id)"
        )
        routed = page.evaluate(
            "obViewer.state.model.edges.filter(e => e.via || e.path || e.style === 'dashed')"
            ".map(e => e.id)"
        )
        assert edge_ids
        assert set(edge_ids) <= set(routed)
        assert shown not in page.inner_text("#ob-details")
        edge_id, point = clear_point(page, edge_ids)
        click_at(page, point)
        page.wait_for_function(
            f"() => document.getElementById('ob-details').innerText.includes({json.dumps(edge_id)})"
        )
        assert shown in page.inner_text("#ob-details")
        assert page.evaluate("obViewer.state.selected") == edge_id


def check_review_picture_fits(page: Any, nodes: int) -> float:
    """The review picture is no wider than its pane (no sideways scroll), every one of its
    ``nodes`` nodes is labelled inside it and no two labels overlap; returns its width."""
    page.evaluate("obViewer.show('review')")
    fit = page.evaluate(
        """() => {
      const svg = document.getElementById('ob-review-graph'), main = document.querySelector('main');
      const view = svg.viewBox.baseVal, labels = [...svg.querySelectorAll('g.rv-node text')];
      return {width: svg.getBoundingClientRect().width, pane: main.clientWidth,
        scroll: main.scrollWidth, labels: labels.length, shown: labels.filter(t => {
          const b = t.getBBox();
          return t.textContent && b.x >= 0 && b.x + b.width <= view.width; }).length};
    }"""
    )
    assert fit["width"] <= fit["pane"]
    assert fit["scroll"] <= fit["pane"]  # nothing in the pane scrolls sideways
    assert fit["labels"] == fit["shown"] == nodes
    assert overlapping_review_labels(page) == []
    return float(fit["width"])


def test_review_picture_of_a_real_run_fits_the_window(
    observed_run: Path, page: Any, shots: Path, tmp_path: Path
) -> None:
    """The review of a real observe of the plain agent (18 workflow and evidence nodes) was a
    picture 3,756 px wide; it fits the pane of a 1400 and a 1200 px window, every node labelled."""
    review = json.loads((observed_run / "review.json").read_text())
    nodes = len(review["workflow"]) + len(review["evidence"])
    assert nodes >= 10
    out = export(observed_run, tmp_path / "r.html")
    page.goto(out.as_uri())
    wait_ready(page)
    assert check_review_picture_fits(page, nodes) <= 1400
    screenshot(page, shots, "review-real-run")
    page.set_viewport_size({"width": 1200, "height": 800})
    page.evaluate("obViewer.show('graph')")
    assert check_review_picture_fits(page, nodes) <= 1200


def test_a_large_review_stays_legible(page: Any, shots: Path, tmp_path: Path) -> None:
    """400 evidence nodes: the picture keeps the pane's width and grows downwards in a box that
    scrolls, every node labelled; selecting a claim brings its support into that box."""
    doc = review_doc()
    for k in range(400):
        fid = f"file:/work/data/part{k:04d}.csv"
        doc["evidence"].append({"id": fid, "kind": "file", "path": fid[5:]})
        doc["edges"].append(
            {"id": f"u{k}", "source": "tool_call:t:s1", "target": fid, "kind": "uses"}
        )
    doc["evidence"].append(doc["evidence"].pop(3))  # the supported plot.png comes last
    (tmp_path / "review.json").write_text(json.dumps(doc))
    page.goto(export(tmp_path / "review.json", tmp_path / "review.html").as_uri())
    wait_ready(page)
    check_review_picture_fits(page, len(doc["workflow"]) + len(doc["evidence"]))
    page.click('button[data-claim="c-plot"]')
    box = page.evaluate(
        f"""() => {{
      const box = document.getElementById('ob-review-box').getBoundingClientRect();
      const c = document.querySelector('#ob-review-graph g.highlighted[data-id="{PLOT}"] circle')
        .getBoundingClientRect();
      return [box.top, box.bottom, c.top, c.bottom, box.height];
    }}"""
    )
    assert box[4] < 900  # a box of its own, not a 10,000 px picture
    assert box[0] <= box[2]  # the plot's node is in view in that box
    assert box[3] <= box[1]
    screenshot(page, shots, "review-large")
