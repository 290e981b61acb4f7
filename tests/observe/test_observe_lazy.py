"""What ``observe`` does not import (issue 11, "observe that feels free"): for a command that never
speaks OTLP, the run imports neither gRPC nor protobuf (and the OTLP message classes) nor PyYAML;
they are imported at the first request that needs them (a gRPC connection, a protobuf body) or
when a configuration file is read. The modules a run's collector needs are imported ahead of the
build (``observe_run.warm``): every component the run's overlay adds is in ``RUN_COMPONENTS``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from otel_bridge import rundir
from otel_bridge.commands.observe_run import RUN_COMPONENTS, build_overlay
from otel_bridge.component import EXPORTER, PROCESSOR, RECEIVER

HEAVY = ("grpc", "google.protobuf", "google.rpc", "opentelemetry.proto", "yaml")

PROBE = """
import json, sys
from otel_bridge import cli
code = cli.main(sys.argv[1:])
heavy = sorted(m for m in sys.modules if m.split(".")[0] in ("grpc", "yaml")
               or m.startswith(("google.protobuf", "google.rpc", "opentelemetry.proto")))
print(json.dumps({"code": code, "heavy": heavy}), file=sys.stderr)
"""


def _observe_modules(tmp_path: Path, *cmd: str) -> dict[str, object]:
    """Run ``observe`` in a fresh interpreter; its exit code and the heavy modules imported."""
    argv = [sys.executable, "-c", PROBE, "observe", "-o", str(tmp_path / "run"), "--no-progress"]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    proc = subprocess.run(
        [*argv, "--", *cmd], capture_output=True, text=True, timeout=120, env=env, check=False
    )
    last = proc.stderr.strip().splitlines()[-1]
    result: dict[str, object] = json.loads(last)
    return result


def test_a_command_without_telemetry_imports_no_grpc_protobuf_or_yaml(tmp_path: Path) -> None:
    result = _observe_modules(tmp_path, "true")
    assert result["code"] == 0
    assert result["heavy"] == [], f"imported although nothing spoke OTLP: {result['heavy']}"
    assert (tmp_path / "run" / rundir.MANIFEST).is_file()


def test_a_json_span_is_recorded_without_protobuf(tmp_path: Path) -> None:
    """The HTTP/JSON path decodes and answers without protobuf (the codec's shared records)."""
    sender = (
        "import json, os, urllib.request\n"
        'span = {"traceId": "0af7651916cd43dd8448eb211c80319c", "spanId": "b7ad6b7169203331",'
        ' "name": "lazy-json", "kind": 1, "startTimeUnixNano": "1", "endTimeUnixNano": "2"}\n'
        'body = {"resourceSpans": [{"scopeSpans": [{"spans": [span]}]}]}\n'
        "req = urllib.request.Request(os.environ['OTEL_EXPORTER_OTLP_ENDPOINT'] + '/v1/traces',"
        " data=json.dumps(body).encode(), headers={'Content-Type': 'application/json'})\n"
        "assert urllib.request.urlopen(req, timeout=30).status == 200\n"
    )
    result = _observe_modules(tmp_path, sys.executable, "-c", sender)
    assert result["code"] == 0
    heavy = [str(m) for m in result["heavy"]]  # type: ignore[attr-defined]
    assert not [m for m in heavy if m.startswith(HEAVY)], heavy
    assert "lazy-json" in (tmp_path / "run" / rundir.SEM_STREAM).read_text()


def test_warm_imports_every_component_the_run_adds(tmp_path: Path) -> None:
    run = rundir.RunDir.create(str(tmp_path / "run"), replace=False)
    overlay, _ = build_overlay(run, "r1", keep_runtime_reads=False)
    kinds = {"receivers": RECEIVER, "processors": PROCESSOR, "exporters": EXPORTER}
    added = {(kinds[a.section], a.id.partition("/")[0]) for a in overlay.components}
    assert added <= set(RUN_COMPONENTS), added - set(RUN_COMPONENTS)
