"""``observe -c FILE`` builds its run on FILE through the shared loader and pipeline builder.

The receiver is named ``otlp/agents``: the run still finds it (by type, through the loader),
tells CMD its endpoint (through the status protocol), counts its spans through the typed counter
reads, and waits for spans still arriving after CMD exits.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from observe_support import observe_argv

from otel_bridge import rundir

SENDER = textwrap.dedent(
    """
    import sys, time
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor

    provider = TracerProvider(resource=Resource.create({"service.name": "late-agent"}))
    provider.add_span_processor(SimpleSpanProcessor(OTLPSpanExporter()))
    tracer = provider.get_tracer("late")
    for i in range(9):
        with tracer.start_as_current_span(f"step-{i}"):
            pass
        if i == 0:
            print("sending", flush=True)
            sys.stdout.close()
        time.sleep(0.1)
    provider.shutdown()
    """
)
AGENT = textwrap.dedent(
    """
    import subprocess, sys
    # CMD exits while its child is still exporting one span every 0.1 s.
    child = subprocess.Popen([sys.executable, "sender.py"], stdout=subprocess.PIPE, text=True)
    assert child.stdout is not None
    assert child.stdout.readline() == "sending\\n"
    """
)
CONFIG = """\
receivers:
  otlp/agents:
    protocols:
      http:
        endpoint: 127.0.0.1:0
processors: {}
exporters: {}
service:
  pipelines: {}
"""


@pytest.mark.slow
def test_observe_counts_the_spans_of_a_named_otlp_receiver_and_drains(tmp_path: Path) -> None:
    """9 spans from an OTel SDK client through ``otlp/agents``, most sent after CMD exited, are
    all recorded (plus the run's root span) and the summary prints that count."""
    (tmp_path / "sender.py").write_text(SENDER)
    (tmp_path / "agent.py").write_text(AGENT)
    (tmp_path / "cfg.yaml").write_text(CONFIG)
    extra = ("-c", str(tmp_path / "cfg.yaml"), "--backend", "portable")
    result = subprocess.run(
        observe_argv(tmp_path, sys.executable, "agent.py", extra=extra),
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=90,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert "recorded: 10 spans (9 from the command)," in result.stderr
    sem = (tmp_path / "run" / rundir.SEM_STREAM).read_text()
    assert sem.count('"step-') == 9
    assert "otel-bridge observe" in sem
