"""An agent instrumented by ``opentelemetry-instrumentation-openai-v2``, as its examples set it up.

The official instrumentation's manual example builds ``TracerProvider()`` with the SDK's default
resource (no ``process.pid``), a ``BatchSpanProcessor`` and an OTLP exporter configured by
``OTEL_EXPORTER_OTLP_ENDPOINT`` alone, and emits only CLIENT ``chat`` spans: no agent span, so
the model calls are all the run has to say who the agent was. Under ``observe`` the process that
sent those spans (``transport_peer``) requested the model, and ``report.md`` names it as the
sender of the spans with its model calls (not as the agent's process: a sender may be a relay),
also under ``--backend=strace`` (a non-blocking connect's local end read by its socket's inode).

Real processes: the real ``openai`` client and instrumentation (installed from PyPI for the agent
only, :func:`fake_openai.openai_v2_site`; skipped when pip cannot get it) against a fake OpenAI
server on loopback, the real ``observe``.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from cli_support import observed_run, run_cli
from fake_openai import fake_openai, with_openai_v2
from waiting import Stderr

pytest.importorskip("openai", reason="needs the openai client (the examples extra)")
pytest.importorskip("opentelemetry.exporter.otlp.proto.grpc", reason="needs the gRPC exporter")
pytest.importorskip("opentelemetry.exporter.otlp.proto.http", reason="needs the HTTP exporter")

AGENT = """
import os, sys
from openai import OpenAI
from opentelemetry import trace
from opentelemetry.instrumentation.openai_v2 import OpenAIInstrumentor
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor

port, protocol, fork = sys.argv[1], sys.argv[2], sys.argv[3] == "fork"
if protocol == "grpc":
    from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
else:
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

def chat(model):
    provider = TracerProvider()
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
    trace.set_tracer_provider(provider)
    client = OpenAI(base_url="http://127.0.0.1:" + port + "/v1", api_key="test")
    for _ in range(2):
        client.chat.completions.create(model=model, messages=[{"role": "user", "content": "hi"}])
    provider.shutdown()

OpenAIInstrumentor().instrument()
child = os.fork() if fork else -1
if child == 0:  # a worker with its own provider and exporter connection
    with open("worker.pid", "w") as f:
        f.write(str(os.getpid()))
    chat("gpt-worker")
    os._exit(0)
with open("agent.pid", "w") as f:
    f.write(str(os.getpid()))
chat("gpt-test")
if child > 0:
    _, status = os.waitpid(child, 0)
    sys.exit(os.waitstatus_to_exitcode(status))
"""


@pytest.fixture
def model_port() -> Iterator[int]:
    """A fake OpenAI chat completions server on loopback (in this process: not followed)."""
    with fake_openai() as port:
        yield port


def _graph(run: Path) -> dict[str, Any]:
    return json.loads((run / "graph.json").read_text(encoding="utf-8"))  # type: ignore[no-any-return]


def _requested(graph: dict[str, Any]) -> dict[str, tuple[int, dict[str, Any]]]:
    """Model label -> (pid of the process that requested it, the edge)."""
    nodes = {n["id"]: n for n in graph["nodes"]}
    return {
        nodes[e["target"]]["label"]: (int(nodes[e["source"]]["facts"]["pid"]), e)
        for e in graph["edges"]
        if e["relation"] == "requested" and nodes[e["source"]]["kind"] == "process"
    }


def _served_at(graph: dict[str, Any]) -> set[int]:
    nodes = {n["id"]: n for n in graph["nodes"]}
    return {
        int(nodes[e["target"]]["facts"]["port"])
        for e in graph["edges"]
        if e["relation"] == "served_at"
    }


@pytest.mark.parametrize("protocol", ["grpc", "http/protobuf"])
def test_an_openai_v2_agent_is_named_by_the_process_that_sent_its_spans(
    tmp_path: Path, model_port: int, protocol: str
) -> None:
    (tmp_path / "agent.py").write_text(with_openai_v2(AGENT), encoding="utf-8")
    run = observed_run(tmp_path, sys.executable, "agent.py", str(model_port), protocol, "-")
    pid = int((tmp_path / "agent.pid").read_text())
    graph = _graph(run)
    [(model, (caller, edge))] = _requested(graph).items()
    assert (model, caller) == ("gpt-test", pid)
    assert (edge["method"], edge["grade"], edge["inferred"]) == ("transport_peer", "C", False)
    assert edge["attrs"]["sent_by"] is True
    # Its model calls join its connection to the model's server, never the OTLP connection.
    assert _served_at(graph) == {model_port}
    report = (run / "report.md").read_text(encoding="utf-8")
    assert f"Spans sent by pid {pid} `" in report, report
    assert "the spans it sent include model calls to `gpt-test`" in report, report
    assert "Agent process" not in report, report
    assert "relay (a local OpenTelemetry Collector)" not in report, report
    assert f"pid {pid} `{sys.executable}" not in report.split("## Not linked")[1], report


def test_a_forked_worker_that_sends_its_own_spans_is_its_own_sender(
    tmp_path: Path, model_port: int
) -> None:
    """Two senders in one agent tree: each model call joins the process that sent it."""
    (tmp_path / "agent.py").write_text(with_openai_v2(AGENT), encoding="utf-8")
    run = observed_run(tmp_path, sys.executable, "agent.py", str(model_port), "grpc", "fork")
    agent = int((tmp_path / "agent.pid").read_text())
    worker = int((tmp_path / "worker.pid").read_text())
    callers = {model: pid for model, (pid, _) in _requested(_graph(run)).items()}
    assert callers == {"gpt-test": agent, "gpt-worker": worker}
    report = (run / "report.md").read_text(encoding="utf-8")
    assert "the spans it sent include model calls to `gpt-worker`" in report, report


@pytest.mark.skipif(shutil.which("strace") is None, reason="needs strace")
@pytest.mark.parametrize("protocol", ["grpc", "http/protobuf"])
def test_under_strace_the_sender_is_found_too(
    tmp_path: Path, model_port: int, protocol: str
) -> None:
    """strace records the exporters' non-blocking connects as pending attempts: their local
    end (read from the socket tables by the socket's inode; IPv6 sockets too, as gRPC opens)
    still joins the request's transport peer to the agent's process."""
    (tmp_path / "agent.py").write_text(with_openai_v2(AGENT), encoding="utf-8")
    command = (sys.executable, "agent.py", str(model_port), protocol, "-")
    run = observed_run(tmp_path, *command, options=("--backend=strace",))
    pid = int((tmp_path / "agent.pid").read_text())
    [(model, (caller, edge))] = _requested(_graph(run)).items()
    assert (model, caller, edge["method"]) == ("gpt-test", pid, "transport_peer")
    report = (run / "report.md").read_text(encoding="utf-8")
    assert f"Spans sent by pid {pid} `" in report, report


def test_a_warm_run_finds_the_sender_too(tmp_path: Path, model_port: int) -> None:
    """``observe --warm-server``, then ``observe``: the run a forked child serves links the
    sender as a cold run does (the mux's client end, the host plane's record of it)."""
    runtime = tmp_path / "xdg"
    runtime.mkdir(mode=0o700)
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    env["XDG_RUNTIME_DIR"] = str(runtime)
    env.pop("OTEL_BRIDGE_WARM", None)
    server = subprocess.Popen(
        [sys.executable, "-m", "otel_bridge", "observe", "--warm-server"],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        Stderr(server, timeout=120).wait_for("warm observe server on")
        (tmp_path / "agent.py").write_text(with_openai_v2(AGENT), encoding="utf-8")
        run = tmp_path / "run"
        command = (sys.executable, "agent.py", str(model_port), "grpc", "-")
        done = run_cli(
            "observe", "--no-review", "-o", str(run), "--", *command,
            cwd=tmp_path, env=env, timeout=300,
        )  # fmt: skip
    finally:
        server.send_signal(signal.SIGTERM)
        server.wait(timeout=60)
        if server.stderr is not None:
            server.stderr.close()
    assert done.returncode == 0, done.stderr
    assert "warm server" in done.stdout + done.stderr, done.stdout
    pid = int((tmp_path / "agent.pid").read_text())
    [(model, (caller, edge))] = _requested(_graph(run)).items()
    assert (model, caller, edge["method"]) == ("gpt-test", pid, "transport_peer")
