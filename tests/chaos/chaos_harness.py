"""Chaos harness: kill -9 a collector at random moments while a real SDK client sends to it.

Shared by ``tests/chaos`` (a few kills) and ``benchmarks/chaos.py`` (many). Real processes:

* collector **A** (``python -m otel_bridge run``) receives OTLP/gRPC and writes every span to a
  ``file`` exporter (``flush_interval: 0``, ``append: true``), a ``graph`` exporter with a
  journal, and an ``otlp`` exporter with a persistent ``sending_queue`` towards B;
* collector **B**, the downstream OTLP receiver, writes what it receives to its own file; it is
  started and stopped at random ("comes and goes");
* an OpenTelemetry SDK client (``OTLPSpanExporter`` over gRPC, one span per export) sends
  uniquely named spans and records which ones A acknowledged.

A is SIGKILLed a random time after each start; after the last round A is started once more,
B is started, and the harness waits until B holds every acknowledged span, then stops A with
SIGTERM. A span is *lost* from a destination when it was acknowledged and is not there:
A's JSON-lines file, B's file (through A's write-ahead queue), A's graph.json.

``config`` picks collector A's configuration: ``"harness"`` (the one above), or a bundled one
run as shipped, its paths and ports set through the variables it reads: ``"local"``
(``configs/local.yaml``: graph with its journal, JSON-lines records, the standing host
receiver; no OTLP exporter, so no B) or ``"phoenix"`` (``configs/phoenix.yaml``: its
``otlphttp`` exporter with the persistent queue towards B over OTLP/HTTP, in place of
Phoenix; its only destination). Destinations a configuration does not have are not checked.
"""

from __future__ import annotations

import http.client
import random
import signal
import subprocess
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from waiting import Stderr, poll, start_run

from otel_bridge.errors import DecodeError
from otel_bridge.exporters.file.codec import decode_line
from otel_bridge.graph import load
from otel_bridge.testing import free_port

SERVICE = "chaos"
ROOT = Path(__file__).resolve().parent.parent.parent
Scenario = Literal["harness", "local", "phoenix"]
DESTINATIONS: dict[Scenario, frozenset[str]] = {
    "harness": frozenset({"file", "downstream", "graph"}),
    "local": frozenset({"file", "graph"}),
    "phoenix": frozenset({"downstream"}),
}
"""The destinations each configuration of collector A has (and the harness checks)."""

COLLECTOR_A = """
receivers:
  otlp:
    protocols:
      grpc:
        endpoint: 127.0.0.1:${env:A_PORT}
processors:
  normalize:
exporters:
  file:
    path: ${env:WORK}/a/spans.jsonl
    signals: [spans]
    flush_interval: 0
    append: true
  graph:
    output: ${env:WORK}/a/graph.json
    flush_interval: 1s
    journal: {path: "${env:WORK}/a/graph.journal"}
  otlp/b:
    endpoint: 127.0.0.1:${env:B_PORT}
    retry_on_failure: {initial_interval: 0.1, max_interval: 0.5, max_elapsed_time: 0}
    sending_queue: {storage: "${env:WORK}/a/queue", num_consumers: 2}
    shutdown_timeout: 5
    signals: [traces]
service:
  pipelines:
    traces:
      receivers: [otlp]
      processors: [normalize]
      exporters: [file, graph, otlp/b]
"""

COLLECTOR_B = """
receivers:
  otlp:
    protocols:
      grpc:
        endpoint: 127.0.0.1:${env:B_PORT}
exporters:
  file:
    path: ${env:WORK}/b/spans.jsonl
    signals: [spans]
    flush_interval: 0
    append: true
service:
  pipelines:
    traces:
      receivers: [otlp]
      exporters: [file]
"""
COLLECTOR_B_HTTP = COLLECTOR_B.replace("grpc:", "http:")
"""B receiving OTLP/HTTP (protobuf), as Phoenix does."""


def bundled_env(scenario: Scenario, work: Path, a_port: int, b_port: int) -> dict[str, str]:
    """The variables that point a bundled config's ports and files into ``work/a``."""
    a = work / "a"
    return {
        "OTEL_BRIDGE_OTLP_GRPC_ENDPOINT": f"127.0.0.1:{a_port}",
        "OTEL_BRIDGE_OTLP_HTTP_ENDPOINT": f"127.0.0.1:{free_port()}",
        "OTEL_BRIDGE_GRAPH": str(a / "graph.json"),
        "OTEL_BRIDGE_GRAPH_JOURNAL": str(a / "graph.journal"),
        "OTEL_BRIDGE_GRAPH_SPILL": str(a / "graph.spill"),
        "OTEL_BRIDGE_RECORDS": str(a / "spans.jsonl"),
        "OTEL_BRIDGE_QUEUE_DIR": str(a / "queue"),
        "PHOENIX_COLLECTOR_ENDPOINT": f"http://127.0.0.1:{b_port}",
    }


@dataclass(slots=True)
class ChaosResult:
    """Counts of one chaos run (span names are unique, so counts are of distinct spans)."""

    kills: int = 0
    downstream_restarts: int = 0
    sent: int = 0
    acknowledged: int = 0
    in_file: int = 0
    downstream: int = 0
    downstream_duplicates: int = 0
    in_graph: int = 0
    lost_file: list[str] = field(default_factory=list)
    lost_downstream: list[str] = field(default_factory=list)
    lost_graph: list[str] = field(default_factory=list)
    torn_lines: int = 0
    """Lines of the JSON-lines files cut short by a kill (not acknowledged data)."""
    seconds: float = 0.0
    checked: frozenset[str] = frozenset()
    """The destinations this configuration has (``file``, ``downstream``, ``graph``)."""


PROTOBUF = "application/x-protobuf"


def post_traces(
    port: int, body: bytes, content_type: str = PROTOBUF, timeout: float = 60
) -> tuple[int, str | None]:
    """POST ``body`` to ``/v1/traces`` on 127.0.0.1:``port``: the status and the
    ``Retry-After`` header (None when absent)."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        conn.request("POST", "/v1/traces", body, {"Content-Type": content_type})
        response = conn.getresponse()
        response.read()
        return response.status, response.getheader("Retry-After")
    finally:
        conn.close()


class Collector:
    """One ``otel-bridge run`` child, restartable."""

    def __init__(self, config: Path, env: dict[str, str], cwd: Path | None = None) -> None:
        self.config = config
        self.env = env
        self.cwd = cwd
        self.proc: subprocess.Popen[str] | None = None
        self.stderr: Stderr | None = None
        self.logs: list[str] = []

    def start(self) -> None:
        """Start and wait until it reports it is running."""
        # INFO: the graph exporter's journal replay is said at INFO (a restart is normal)
        self.proc, self.stderr = start_run(self.config, self.env, cwd=self.cwd, log_level="INFO")

    @property
    def running(self) -> bool:
        """Whether the child is alive."""
        return self.proc is not None and self.proc.poll() is None

    def stop(self, sig: int = signal.SIGTERM) -> int:
        """Signal the child and wait for it; its exit status."""
        proc, err = self.proc, self.stderr
        if proc is None or err is None:
            return 0
        if proc.poll() is None:
            proc.send_signal(sig)
        try:
            code = proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            code = proc.wait()
        self.logs.append(err.log())
        self.proc = self.stderr = None
        return code


class Client:
    """An SDK client on a thread: one span per export, recording what was acknowledged."""

    def __init__(self, port: int, pace: float) -> None:
        self.port = port
        self.pace = pace
        self.sent = 0
        self.acked: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="chaos-client", daemon=True)

    def start(self) -> None:
        """Start sending."""
        self._thread.start()

    def stop(self) -> None:
        """Stop after the export in flight."""
        self._stop.set()
        self._thread.join(60)

    def _run(self) -> None:
        from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
        from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExportResult

        acked = self.acked

        class Recording(OTLPSpanExporter):
            def export(self, spans: object) -> SpanExportResult:
                batch: list[ReadableSpan] = list(spans)  # type: ignore[call-overload]
                result = super().export(batch)
                if result is SpanExportResult.SUCCESS:
                    acked.extend(s.name for s in batch)
                return result

        provider = TracerProvider(resource=Resource.create({"service.name": SERVICE}))
        exporter = Recording(endpoint=f"127.0.0.1:{self.port}", insecure=True, timeout=1)
        provider.add_span_processor(SimpleSpanProcessor(exporter))
        tracer = provider.get_tracer("chaos")
        while not self._stop.is_set():
            with tracer.start_as_current_span(f"op-{self.sent}"):
                pass
            self.sent += 1
            self._stop.wait(self.pace)  # pacing the client's rate, not synchronisation
        provider.shutdown()


def read_names(path: Path) -> tuple[list[str], int]:
    """Span names in a JSON-lines file, and the number of torn (undecodable) lines."""
    if not path.exists():
        return [], 0
    names: list[str] = []
    torn = 0
    with path.open(encoding="utf-8", errors="replace") as f:
        for line in f:
            if not line.strip():
                continue
            try:
                names.extend(s.name for s in decode_line(line).spans)
            except DecodeError:
                torn += 1
    return names, torn


def graph_names(path: Path) -> set[str]:
    """Names of the span nodes in graph.json (key ``span:<service>:<name>``)."""
    prefix = f"span:{SERVICE}:"
    return {n.key[len(prefix) :] for n in load(path).nodes if n.key.startswith(prefix)}


def run_chaos(
    work: Path,
    *,
    kills: int,
    seed: int,
    up: tuple[float, float] = (0.3, 1.5),
    pace: float = 0.005,
    journal: bool = True,
    config: Scenario = "harness",
) -> ChaosResult:
    """Run the scenario of the module docstring in ``work``; the counts (see ChaosResult)."""
    rng = random.Random(seed)
    started = time.monotonic()
    env = {"A_PORT": str(free_port()), "B_PORT": str(free_port()), "WORK": str(work)}
    if config == "harness":
        text = COLLECTOR_A if journal else COLLECTOR_A.replace("    journal:", "    # journal:")
    else:
        text = (ROOT / "configs" / f"{config}.yaml").read_text()
        env.update(bundled_env(config, work, int(env["A_PORT"]), int(env["B_PORT"])))
        (work / "a").mkdir(mode=0o700, exist_ok=True)
    has_b = "downstream" in DESTINATIONS[config]
    (work / "a.yaml").write_text(text)
    (work / "b.yaml").write_text(COLLECTOR_B_HTTP if config == "phoenix" else COLLECTOR_B)
    a = Collector(work / "a.yaml", env)
    b = Collector(work / "b.yaml", env)
    client = Client(int(env["A_PORT"]), pace)
    result = ChaosResult()
    try:
        client.start()
        for _ in range(kills):
            a.start()
            if has_b and rng.random() < 0.5:
                if b.running:
                    b.stop()
                else:
                    b.start()
                    result.downstream_restarts += 1
            a_up = rng.uniform(*up)
            threading.Event().wait(a_up)  # the random moment of the kill, not synchronisation
            a.stop(signal.SIGKILL)
            result.kills += 1
        a.start()
        client.stop()
        if has_b:
            if not b.running:
                b.start()
                result.downstream_restarts += 1
            acked = set(client.acked)
            poll(lambda: set(read_names(work / "b" / "spans.jsonl")[0]), acked.issubset, 120)
        a.stop()
    finally:
        client.stop()
        a.stop(signal.SIGKILL)
        b.stop()
    return _tally(work, client, result, started, DESTINATIONS[config])


def _tally(
    work: Path, client: Client, result: ChaosResult, started: float, checked: frozenset[str]
) -> ChaosResult:
    acked = set(client.acked)
    in_file, torn_a = read_names(work / "a" / "spans.jsonl") if "file" in checked else ([], 0)
    downstream, torn_b = read_names(work / "b" / "spans.jsonl")
    in_graph = graph_names(work / "a" / "graph.json") if "graph" in checked else set()
    result.checked = checked
    result.sent = client.sent
    result.acknowledged = len(acked)
    result.in_file = len(acked & set(in_file))
    result.downstream = len(acked & set(downstream))
    result.downstream_duplicates = len(downstream) - len(set(downstream))
    result.in_graph = len(acked & in_graph)
    result.lost_file = sorted(acked - set(in_file)) if "file" in checked else []
    result.lost_downstream = sorted(acked - set(downstream)) if "downstream" in checked else []
    result.lost_graph = sorted(acked - in_graph) if "graph" in checked else []
    result.torn_lines = torn_a + torn_b
    result.seconds = time.monotonic() - started
    return result
