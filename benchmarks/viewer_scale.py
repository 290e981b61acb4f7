"""Viewer performance in headless Chromium: first paint and filter changes at 10,000 nodes, and
live mode under 1,000 events/s.

Run: ``python benchmarks/viewer_scale.py [--nodes 10000] [--repeat 5] [--live-seconds 5]
[--flags swiftshader] [--flags software-compositing] [--renderer auto|canvas|webgl]`` (needs the
dev extra's playwright and Debian's chromium). Prints one JSON object.

* **first paint**: the exported report of a synthetic graph (agents, tool calls, models,
  processes, executables, files at project paths so that nothing folds, endpoints; about 1.3
  edges per node, one in ten tool-call links inferred) is opened; the figure is
  ``performance.now()`` when the frame holding the graph's first render is on screen (two
  animation frames after that render), i.e. milliseconds since the navigation started, parsing of
  the inlined data included. The page picks its renderer (``docs/viewer.md``, *Renderers*): the
  Canvas 2D one where WebGL runs in software, as here; ``--renderer`` forces one
  (``?renderer=``). The page's ``performance.mark`` entries split it into stages (``STAGES``).
  Median of ``--repeat`` fresh pages.
* **filter change**: ``obViewer.setFilter`` on a kind, a relation and a grade, each off then on;
  the time from the call until two animation frames later (the frame with the change painted).
* **browser CPU**: user + system time of every Chromium process over each measured interval,
  also split by Chromium process type (renderer: our JavaScript, the canvas or sigma, layout;
  gpu-process: SwiftShader executing WebGL and compositing).
* **flag sets** (``FLAG_SETS``): each measured in its own browser; ``swiftshader`` is what the
  tests use.
* **live**: a :class:`~otel_bridge.viewer.live.LiveView` fed by a source that grows by 1,000
  events (one node and one edge each) per second; a page follows it over server-sent events.
  Reported: events applied, the page's longest main-thread task (``longtask`` entries) and how
  far the page's last rendered graph was behind the source when the feed stopped.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import psutil

from otel_bridge.testing import graph_document, graph_edge_doc, graph_node_doc
from otel_bridge.viewer import Bundle, render
from otel_bridge.viewer.live import LiveView

CHROMIUM_ARGS = ["--use-angle=swiftshader", "--enable-unsafe-swiftshader", "--no-sandbox"]
FLAG_SETS = {
    # What the tests use: WebGL and the display compositor both on SwiftShader (software Vulkan).
    "swiftshader": CHROMIUM_ARGS,
    # WebGL on SwiftShader, the page's layers composited by Skia on the CPU instead.
    "software-compositing": [*CHROMIUM_ARGS, "--disable-gpu-compositing"],
}
MARKS = ("ob:script", "ob:boot", "ob:model", "ob:graph", "ob:rendered", "ob:painted")
"""The page's ``performance.mark`` names in boot order (``docs/viewer.md``, *Performance*)."""
T0 = 1_796_000_000_000_000_000


def _node(node_id: str, kind: str, label: str, t: int, channel: str) -> dict[str, Any]:
    backend = "otlp" if channel == "sem" else "linux"
    return graph_node_doc(
        node_id,
        kind,
        label=label,
        channels=[channel],
        backends=[backend],
        first_seen=t,
        last_seen=t + 1_000_000,
    )


def _edge(i: int, source: str, relation: str, target: str, t: int, **flags: Any) -> dict[str, Any]:
    return graph_edge_doc(
        f"e-{i:016x}",
        source,
        relation,
        target,
        support=[f"obs-{i}"],
        first_seen=t,
        last_seen=t,
        **flags,
    )


def synthetic_graph(n: int) -> dict[str, Any]:
    """A graph.json document of about ``n`` nodes shaped like a long agent session."""
    tools, procs = n // 10, n // 10
    agents, models, exes, endpoints = 5, 5, 50, n // 20
    files = n - tools - procs - agents - models - exes - endpoints
    nodes: list[dict[str, Any]] = []
    edges: list[dict[str, Any]] = []
    for a in range(agents):
        nodes.append(_node(f"agent:svc:a{a}", "agent", f"agent {a}", T0, "sem"))
    for m in range(models):
        nodes.append(_node(f"model:p:m{m}", "model", f"model {m}", T0, "sem"))
    for x in range(exes):
        nodes.append(_node(f"executable:/usr/bin/tool{x}", "executable", f"tool{x}", T0, "os"))
    for k in range(tools):
        t = T0 + k * 10_000_000
        tool, proc = f"tool_call:t:{k:08x}", f"process:h:{1000 + k}:{k}"
        nodes.append(_node(tool, "tool_call", "run_command", t, "sem"))
        nodes.append(_node(proc, "process", f"tool{k % exes} ({1000 + k})", t, "os"))
        edges.append(
            _edge(
                len(edges),
                f"agent:svc:a{k % agents}",
                "invoked",
                tool,
                t,
                grade="U",
                channels=["sem"],
                causal=None,
                attribution=["reported"],
            )
        )
        edges.append(
            _edge(
                len(edges),
                tool,
                "requested",
                f"model:p:m{k % models}",
                t,
                grade="U",
                channels=["sem"],
                causal=None,
                attribution=["reported"],
            )
        )
        inferred = k % 10 == 0
        edges.append(
            _edge(
                len(edges),
                tool,
                "correlated_with_process",
                proc,
                t,
                causal=False,
                inferred=inferred,
                identity_exact=not inferred,
                channels=["sem"],
                grade="D" if inferred else "C",
                attribution=["heuristic" if inferred else "exact_identity"],
            )
        )
        edges.append(_edge(len(edges), proc, "executed", f"executable:/usr/bin/tool{k % exes}", t))
        if k:
            edges.append(_edge(len(edges), f"process:h:{1000 + k - 1}:{k - 1}", "spawned", proc, t))
    for f in range(files):
        path = f"file:/work/project/data/part{f:06d}.csv"
        t = T0 + f * 1_000_000
        nodes.append(_node(path, "file", path[5:], t, "os"))
        edges.append(
            _edge(
                len(edges),
                f"process:h:{1000 + f % procs}:{f % procs}",
                "wrote" if f % 3 else "opened",
                path,
                t,
            )
        )
    for e in range(endpoints):
        ep = f"endpoint:tcp:10.0.{e // 250}.{e % 250}:443"
        nodes.append(_node(ep, "endpoint", ep[9:], T0, "os"))
        edges.append(
            _edge(len(edges), f"process:h:{1000 + e % procs}:{e % procs}", "connected_to", ep, T0)
        )
    return graph_document(nodes, edges)


def _launch(playwright: Any, flags: list[str]) -> Any:
    exe = shutil.which("chromium") or shutil.which("chromium-browser")
    if exe is None:
        raise SystemExit("Debian's chromium is needed (apt-get install chromium)")
    return playwright.chromium.launch(executable_path=exe, args=flags)


def chromium_cpu_by_type() -> dict[str, float]:
    """CPU seconds (user + system) used so far by this process's Chromium descendants, per
    Chromium process type (``browser``, ``renderer``, ``gpu-process``, ...).

    Wall-clock figures on a loaded machine mostly measure the wait for a core; the CPU the
    browser spent is what the page costs.
    """
    total: dict[str, float] = {}
    for proc in psutil.Process().children(recursive=True):
        try:
            if "chrom" not in proc.name():
                continue
            kind = next((a[7:] for a in proc.cmdline() if a.startswith("--type=")), "browser")
            t = proc.cpu_times()
            total[kind] = total.get(kind, 0.0) + t.user + t.system
        except psutil.NoSuchProcess:
            continue
    return total


def chromium_cpu_s() -> float:
    """CPU seconds used so far by every Chromium process (summed over their types)."""
    return sum(chromium_cpu_by_type().values())


def _cpu_delta(before: dict[str, float]) -> dict[str, float]:
    after = chromium_cpu_by_type()
    return {k: after[k] - before.get(k, 0.0) for k in after}


def _ready(page: Any) -> None:
    page.wait_for_function(
        "() => window.obViewer && window.obViewer.ready && obViewer.firstPaint() !== null",
        timeout=120_000,
    )


STAGES = (
    ("page parse and vendored scripts", "navigation", "ob:script"),
    ("bundle JSON decode", "ob:script", "ob:boot"),
    ("model: folds, lanes, layout, filters", "ob:boot", "ob:model"),
    ("renderer choice (WebGL probe; WebGL: the graphology graph)", "ob:model", "ob:graph"),
    (
        "first render (canvas: one frame; WebGL: sigma's contexts, programs)",
        "ob:graph",
        "ob:rendered",
    ),
    ("until the frame is on screen", "ob:rendered", "ob:painted"),
)
"""First-paint stages: (name, from mark, to mark); ``navigation`` is time 0."""


def _stages(page: Any) -> dict[str, float]:
    marks: dict[str, float] = dict(
        page.evaluate("performance.getEntriesByType('mark').map(m => [m.name, m.startTime])")
    )
    marks["navigation"] = 0.0
    return {name: marks[b] - marks[a] for name, a, b in STAGES if a in marks and b in marks}


def _open(browser: Any, url: str, out: dict[str, list[Any]]) -> Any:
    page = browser.new_page(viewport={"width": 1400, "height": 900})
    cpu = chromium_cpu_by_type()
    page.goto(url)
    _ready(page)
    out["renderer"].append(page.evaluate("obViewer.renderer()"))
    out["paint_cpu"].append(_cpu_delta(cpu))
    out["paints"].append(page.evaluate("obViewer.firstPaint()"))
    out["stages"].append(_stages(page))
    return page


def _filters(page: Any, out: dict[str, list[Any]]) -> None:
    for group, value in (("kind", "file"), ("relation", "wrote"), ("grade", "D")):
        for on in ("false", "true"):
            cpu = chromium_cpu_by_type()
            out["filters"].append(page.evaluate(f"obViewer.setFilter('{group}', '{value}', {on})"))
            out["filter_cpu"].append(_cpu_delta(cpu))


def _by_type(samples: list[dict[str, float]]) -> dict[str, float]:
    kinds = sorted({k for s in samples for k in s})
    return {k: round(statistics.median(s.get(k, 0.0) for s in samples) * 1000) for k in kinds}


def measure_static(
    browser: Any, doc: dict[str, Any], repeat: int, renderer: str = "auto"
) -> dict[str, Any]:
    """First paint and filter-change times of the exported report of ``doc``."""
    print(f"static: {len(doc['nodes'])} nodes", file=sys.stderr, flush=True)
    out: dict[str, list[Any]] = {k: [] for k in ("paints", "paint_cpu", "stages", "filters")}
    out["filter_cpu"], out["renderer"] = [], []
    with tempfile.TemporaryDirectory() as tmp:
        report = Path(tmp) / "report.html"
        report.write_text(render(Bundle(source="synthetic", graph=doc)))
        url = report.as_uri() + ("" if renderer == "auto" else f"?renderer={renderer}")
        for _ in range(repeat):
            page = _open(browser, url, out)
            _filters(page, out)
            page.close()
        size = report.stat().st_size
    stages = {
        name: round(statistics.median(s.get(name, 0.0) for s in out["stages"]), 1)
        for name, _, _ in STAGES
    }
    return {
        "renderer": out["renderer"][0],
        "report_bytes": size,
        "first_paint_ms": _stats(out["paints"]),
        "first_paint_stages_ms": stages,
        "first_paint_browser_cpu_ms": _stats([sum(c.values()) * 1000 for c in out["paint_cpu"]]),
        "first_paint_cpu_by_process_ms": _by_type(out["paint_cpu"]),
        "filter_change_ms": _stats(out["filters"]),
        "filter_change_browser_cpu_ms": _stats([sum(c.values()) * 1000 for c in out["filter_cpu"]]),
        "filter_change_cpu_by_process_ms": _by_type(out["filter_cpu"]),
    }


def _stats(values: list[float]) -> dict[str, float]:
    return {
        "median": round(statistics.median(values), 1),
        "min": round(min(values), 1),
        "max": round(max(values), 1),
        "n": len(values),
    }


class GrowingSource:
    """A graph that gains ``rate`` events (a file node and its write edge) per second."""

    def __init__(self, base: dict[str, Any], rate: int) -> None:
        self.base, self.rate = base, rate
        self.started: float | None = None  # no events until the page is up
        self.stopped: float | None = None

    def events(self) -> int:
        if self.started is None:
            return 0
        end = self.stopped if self.stopped is not None else time.monotonic()
        return int((end - self.started) * self.rate)

    def __call__(self) -> dict[str, Any]:
        n = self.events()
        nodes = list(self.base["nodes"])
        edges = list(self.base["edges"])
        proc = next(d["id"] for d in nodes if d["kind"] == "process")
        for i in range(n):
            path = f"file:/work/live/f{i:07d}"
            nodes.append(_node(path, "file", path[5:], T0 + i, "os"))
            edges.append(_edge(10_000_000 + i, proc, "wrote", path, T0 + i))
        return {
            **self.base,
            "nodes": nodes,
            "edges": edges,
            "summary": {**self.base["summary"], "observations": n, "nodes": len(nodes)},
        }


def measure_live(browser: Any, seconds: float, rate: int) -> dict[str, Any]:
    """Follow a source growing at ``rate`` events/s for ``seconds`` in a live page."""
    print("live", file=sys.stderr, flush=True)
    source = GrowingSource(synthetic_graph(200), rate)
    live = LiveView(source, source="synthetic-live")
    live.start()
    page = browser.new_page(viewport={"width": 1400, "height": 900})
    page.add_init_script(
        "window.__long = 0; new PerformanceObserver(l => l.getEntries().forEach("
        "e => { window.__long = Math.max(window.__long, e.duration); }))"
        ".observe({entryTypes: ['longtask']});"
    )
    page.goto(live.url)
    _ready(page)
    page.evaluate("window.__long = 0")
    source.started = time.monotonic()
    done = threading.Event()
    done.wait(seconds)  # let the feed run for the measured period
    source.stopped = time.monotonic()
    expected = source.events()
    page.wait_for_function(
        f"() => obViewer.state.bundle.graph.summary.observations >= {expected}", timeout=60_000
    )
    shown = page.evaluate("obViewer.state.bundle.graph.summary.observations")
    longest = page.evaluate("window.__long")
    updates = page.evaluate("obViewer.version")
    page.close()
    live.finish()
    return {
        "events": expected,
        "rate_per_s": rate,
        "seconds": seconds,
        "page_updates": updates,
        "events_shown": shown,
        "longest_task_ms": longest,
    }


def main() -> None:
    from playwright.sync_api import sync_playwright

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--nodes", type=int, default=10_000)
    parser.add_argument("--small", type=int, default=200, help="the same-run baseline size")
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--live-seconds", type=float, default=5.0)
    parser.add_argument("--rate", type=int, default=1000)
    parser.add_argument(
        "--renderer",
        choices=("auto", "canvas", "webgl"),
        default="auto",
        help="the graph renderer: the page's own choice (default) or a forced one",
    )
    parser.add_argument(
        "--flags",
        action="append",
        choices=sorted(FLAG_SETS),
        help="Chromium flag sets to measure, each in its own browser (default: all)",
    )
    args = parser.parse_args()
    docs = {n: synthetic_graph(n) for n in sorted({args.small, args.nodes})}
    result: dict[str, Any] = {"load_average_before": os.getloadavg(), "static": {}}
    with sync_playwright() as p:
        for name in args.flags or list(FLAG_SETS):
            print(f"flags: {name}", file=sys.stderr, flush=True)
            browser = _launch(p, FLAG_SETS[name])
            result["static"][name] = {
                "args": FLAG_SETS[name],
                **{
                    str(n): {
                        "edges": len(doc["edges"]),
                        **measure_static(browser, doc, args.repeat, args.renderer),
                    }
                    for n, doc in docs.items()
                },
            }
            browser.close()
        browser = _launch(p, CHROMIUM_ARGS)
        result["live"] = (
            measure_live(browser, args.live_seconds, args.rate) if args.live_seconds else None
        )
        browser.close()
    result["load_average_after"] = os.getloadavg()
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
