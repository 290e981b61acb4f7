"""A mysql-style attached password quoted in a tool call's arguments or an exception is hidden.

A new user's plain OpenTelemetry SDK agent runs ``mysql -u root -pPW shop`` as a tool call: its
``gen_ai.tool.call.arguments`` carry the command inside JSON (``{"command": "mysql ... -pPW
shop"}``), and the failed call's exception message and span status quote it inside a Python
list (``Command '['sh', '-c', 'mysql ... -pPW shop']' returned ...``). The ``mysql -pPW`` rule
applied only to a command line's own words, so ``-psk-test123`` stayed readable in sem.jsonl;
the span status message was not redacted at all. Neither is left anywhere in the run directory.
"""

from __future__ import annotations

import sys
from pathlib import Path

from cli_support import observed_run

SECRET = "sk-test123"
AGENT = """
import json
import os
import subprocess
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor

resource = Resource.create({"service.name": "db-agent", "process.pid": os.getpid()})
provider = TracerProvider(resource=resource)
provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
tracer = provider.get_tracer("newuser")
command = "mysql -u root -pPASSWORD shop"
try:
    with tracer.start_as_current_span("execute_tool run_command") as call:
        call.set_attribute("gen_ai.operation.name", "execute_tool")
        call.set_attribute("gen_ai.tool.name", "run_command")
        call.set_attribute("gen_ai.tool.call.id", "call-1")
        call.set_attribute("gen_ai.tool.call.arguments", json.dumps({"command": command}))
        subprocess.run(["sh", "-c", "exit 1; " + command], check=True)
except subprocess.CalledProcessError:
    pass
provider.shutdown()
""".replace("PASSWORD", SECRET)


def test_an_attached_mysql_password_in_quoted_text_is_hidden(tmp_path: Path) -> None:
    (tmp_path / "agent.py").write_text(AGENT, encoding="utf-8")
    run = observed_run(tmp_path, sys.executable, "agent.py")
    sem = (run / "sem.jsonl").read_text(encoding="utf-8")
    assert '{\\"command\\": \\"mysql -u root -p[REDACTED] shop\\"}' in sem, sem
    assert "'exit 1; mysql -u root -p[REDACTED] shop']' returned" in sem, sem
    for path in sorted(run.rglob("*")):
        if path.is_file():
            assert SECRET not in path.read_text(encoding="utf-8", errors="replace"), path
