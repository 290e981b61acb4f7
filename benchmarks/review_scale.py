"""Review scale benchmark: a one-hour-scale session (issue 14's "done when").

Generates a run directory the way ``observe`` writes one, but synthetic: one agent session with
``--tools`` tool calls (default 2,000; every 20th runs pytest, the others a script writing one
file and reading the previous one), a ``chat`` span per call carrying the last messages of the
conversation (``gen_ai.input.messages``, ``gen_ai.output.messages``), and ``--events`` OS events
(default 200,000) in ``os.jsonl`` as OTLP/JSON log records. ``graph.json`` holds the matching
graph: every process opens library files (``opened`` edges) plus its workspace files, so the
graph's edges account for the OS events. Then ``build_review`` runs ``--reps`` times on it.

Reported: the median wall time and process CPU time of one review (``build_review``: reading the
streams and graph.json included, writing excluded) and of the whole ``write_review`` (build,
schema validation and writing the three files), the sizes, and the load average around the runs.
The machine is shared: the CPU time is the steadier figure.

Run: ``python benchmarks/review_scale.py [--tools 2000] [--events 200000] [--reps 3]``.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import orjson

from otel_bridge.graph.document import GraphNode
from otel_bridge.model import AgentFacts, ProcessFacts, Resource, Scope, Span, ToolCallFacts
from otel_bridge.review import build_review, write_review
from otel_bridge.testing import SyntheticRun

TRACE = "ab" * 16
HOST = "bench-host"
AGENT = "agent:bench:bench-agent"
LIBRARY_FILES = 2_000
WORKSPACE = "/srv/work"


class Generator(SyntheticRun):
    """Builds the spans, graph and OS lines of the synthetic session."""

    def __init__(self, tools: int, events: int) -> None:
        super().__init__(
            resource=Resource(attributes={"service.name": "bench"}),
            scope=Scope(name="bench"),
            clock=1_796_000_000_000_000_000,
        )
        self.tools = tools
        self.events = events
        self.os_records = 0

    def span(self, n: int, name: str, attrs: dict[str, Any]) -> Span:
        return self.add_span(TRACE, n, name, attrs, 1 if n != 1 else 0, duration_ms=5)

    def edge(self, source: str, relation: str, target: str, **kw: Any) -> None:
        t = self.tick(0) + len(self.edges)
        self.add_edge(source, relation, target, at=t, record=f"linux:{self.os_records}", **kw)
        self.os_records += 1

    def build(self) -> None:
        """The whole session."""
        facts = AgentFacts(service="bench", name="bench-agent")
        self.nodes[AGENT] = GraphNode(id=AGENT, kind="agent", label="bench-agent", facts=facts)
        self.span(1, "invoke_agent bench-agent", {"gen_ai.operation.name": "invoke_agent"})
        opens_per_tool = max(1, (self.events - 3 * self.tools) // self.tools)
        history: list[dict[str, Any]] = [
            {"role": "user", "parts": [{"type": "text", "content": "Run the whole analysis."}]}
        ]
        for i in range(self.tools):
            call = f"call_{i}"
            output = [{"role": "assistant", "parts": [{"type": "tool_call", "id": call}]}]
            self.chat(10 + 2 * i, history[-8:], output)
            history += output
            self.tool(11 + 2 * i, i, call, opens_per_tool)
            history.append({"role": "tool", "parts": [{"type": "tool_call_response", "id": call}]})
        answer = f"I wrote out/result-{self.tools - 1}.csv and all tests pass."
        final = [{"role": "assistant", "parts": [{"type": "text", "content": answer}]}]
        self.chat(5, history[-8:], final)

    def chat(self, n: int, inputs: list[dict[str, Any]], outputs: list[dict[str, Any]]) -> None:
        """One model request."""
        self.span(n, "chat m", self.chat_attrs(inputs, outputs))

    def tool(self, n: int, i: int, call: str, opens: int) -> None:
        """One tool call, its process, its file opens, its write and its read."""
        test = i % 20 == 19
        argv = ("python", "-m", "pytest", "-q") if test else ("python", f"step{i}.py")
        attrs = self.command_attrs(call, argv, "exit code 0")
        span = self.span(n, "execute_tool run_command", attrs)
        tool = f"tool_call:{TRACE}:{span.span_id.hex()}"
        tfacts = ToolCallFacts(tool="run_command", call_id=call, trace_id=TRACE)
        self.nodes[tool] = GraphNode(id=tool, kind="tool_call", label="run_command", facts=tfacts)
        pid = f"process:{HOST}:{10_000 + i}:{i}"
        pfacts = ProcessFacts(
            host_id=HOST,
            pid=10_000 + i,
            argv=argv,
            exit_code=0,
            cwd=WORKSPACE,
            start_time_ms=span.start_time_unix_nano // 1_000_000,
        )
        self.nodes[pid] = GraphNode(
            id=pid,
            kind="process",
            label="python",
            facts=pfacts,
            first_seen=span.start_time_unix_nano,
            last_seen=span.end_time_unix_nano,
        )
        self.edge(AGENT, "invoked", tool, attribution=("reported",), grade="U")
        self.edge(
            tool,
            "correlated_with_process",
            pid,
            causal=False,
            inferred=False,
            identity_exact=True,
            attribution=("exact_identity",),
            grade="C",
        )
        syscall: dict[str, Any] = {"causal": True, "attribution": ("syscall",), "grade": "A"}
        for k in range(opens):
            self.edge(
                pid, "opened", self.file(f"/usr/lib/py/m{(i + k) % LIBRARY_FILES}.py"), **syscall
            )
        if i:
            self.edge(pid, "opened", self.file(f"{WORKSPACE}/out/result-{i - 1}.csv"), **syscall)
        if not test:
            self.edge(pid, "wrote", self.file(f"{WORKSPACE}/out/result-{i}.csv"), **syscall)

    def write(self, run_dir: Path) -> None:
        """``sem.jsonl``, ``os.jsonl`` (one log record per OS event) and ``graph.json``."""
        with open(run_dir / "sem.jsonl", "wb") as f:
            for encoded in self.span_lines():
                f.write(encoded + b"\n")
        resource = {"attributes": [{"key": "evidence.channel", "value": {"stringValue": "os"}}]}
        with open(run_dir / "os.jsonl", "wb") as f:
            for r in range(self.os_records):
                record = {
                    "timeUnixNano": str(self.clock + r),
                    "eventName": "file.open",
                    "attributes": [
                        {"key": "evidence.record_id", "value": {"stringValue": f"linux:{r}"}},
                        {"key": "process.pid", "value": {"intValue": str(10_000 + r % 2_000)}},
                        {"key": "file.path", "value": {"stringValue": f"/usr/lib/py/m{r}.py"}},
                    ],
                }
                line = {
                    "resourceLogs": [
                        {"resource": resource, "scopeLogs": [{"logRecords": [record]}]}
                    ]
                }
                f.write(orjson.dumps(line) + b"\n")
        coverage = {"collection.file.available": 1, "collection.process.available": 1}
        self.write_graph(run_dir / "graph.json", "bench", coverage)


def _timed(fn: Any, *args: Any) -> tuple[Any, float, float]:
    """``fn(*args)`` with its wall and process CPU time."""
    wall, cpu = time.perf_counter(), time.process_time()
    out = fn(*args)
    return out, time.perf_counter() - wall, time.process_time() - cpu


def main() -> int:
    """Generate the run directory, review it ``--reps`` times, print the figures."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tools", type=int, default=2_000)
    parser.add_argument("--events", type=int, default=200_000)
    parser.add_argument("--reps", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="review-bench-") as tmp:
        run_dir = Path(tmp)
        generator = Generator(args.tools, args.events)
        generator.build()
        generator.write(run_dir)
        sizes = {p.name: p.stat().st_size for p in sorted(run_dir.iterdir())}
        load_before = os.getloadavg()[0]
        walls, cpus, write_walls, write_cpus = [], [], [], []
        doc: dict[str, Any] = {}
        for rep in range(args.reps):
            (doc, _records), wall, cpu = _timed(build_review, str(run_dir))
            walls.append(wall)
            cpus.append(cpu)
            # the whole command: build, validate and write review.json, review.md, records
            _, wall, cpu = _timed(write_review, str(run_dir), str(run_dir / f"out-{rep}"))
            write_walls.append(wall)
            write_cpus.append(cpu)
        load_after = os.getloadavg()[0]
    print(f"python {platform.python_version()} on {platform.machine()}, {os.cpu_count()} cpus")
    print(f"load average (1 min) {load_before:.1f} before, {load_after:.1f} after")
    print(f"tool calls {args.tools}, OS events (graph edges) {generator.os_records}")
    print("files: " + ", ".join(f"{k} {v / 1e6:.1f} MB" for k, v in sizes.items()))
    print(
        f"review: records {doc['records']['total']}, evidence {len(doc['evidence'])}, "
        f"edges {len(doc['edges'])}, claims {len(doc['claims'])}, findings {len(doc['findings'])}"
    )
    wall_s, cpu_s = statistics.median(walls), statistics.median(cpus)
    print(f"build_review: wall median {wall_s:.2f} s, cpu median {cpu_s:.2f} s")
    wall_s, cpu_s = statistics.median(write_walls), statistics.median(write_cpus)
    print(f"write_review (build + write the files): wall median {wall_s:.2f} s, cpu {cpu_s:.2f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
