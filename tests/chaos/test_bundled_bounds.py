"""The bundled configurations bound their graph (issue 13, "Load": a standing collector's graph
must not grow until it refuses everything): every bundled graph exporter has bounds and a spill
file in the collector's state directory, and a real collector from ``configs/local.yaml`` keeps
accepting a growing graph and says what it spilled."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import yaml
from chaos_harness import post_traces
from waiting import Stderr

from otel_bridge import rundir
from otel_bridge.commands.observe import durable_state_in_run
from otel_bridge.config import read_config
from otel_bridge.exporters.graph.journal import read_frames
from otel_bridge.otlp.proto_codec import encode_traces
from otel_bridge.testing import make_span

REPO = Path(__file__).resolve().parent.parent.parent
CONFIGS = REPO / "configs"
_BANNER = re.compile(r"OTLP/http on ([\d.]+):(\d+)")


def _default(value: str) -> str:
    """``value`` with each ``${env:NAME:-default}`` replaced by its default."""
    return re.sub(r"\$\{env:[A-Z_]+:-([^}]*)\}", r"\1", value)


def test_every_bundled_graph_exporter_is_bounded_and_spills_beside_its_state() -> None:
    """Each graph exporter of a bundled configuration sets max_nodes and max_edges and spills
    to a file next to its journal (the collector's state directory)."""
    graphs = 0
    for path in sorted(CONFIGS.glob("*.yaml")):
        exporters = yaml.safe_load(path.read_text()).get("exporters") or {}
        for key, settings in exporters.items():
            if str(key).partition("/")[0] != "graph":
                continue
            graphs += 1
            bounds = settings["bounds"]
            assert "max_nodes" in bounds, path.name
            assert "max_edges" in bounds, path.name
            spill = Path(_default(str(bounds["spill"])))
            journal = Path(_default(str(settings["journal"]["path"])))
            assert spill.parent == journal.parent, path.name
            assert spill.name.endswith(".spill"), path.name
    assert graphs >= 3  # local, gateway, gateway-postgres


def test_a_collector_from_local_yaml_keeps_accepting_a_growing_graph(tmp_path: Path) -> None:
    """configs/local.yaml as shipped, its bounds made small through the variables it reads
    (300 nodes and edges): 2,000 distinct spans are all accepted, the graph stops at its
    bounds, graph.json's summary.bounded counts what was spilled, the spill file in the
    collector's directory holds exactly that, and the log says the bounds were reached."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")} | {
        "PYTHONPATH": os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH")) if p),
        "OTEL_BRIDGE_OTLP_GRPC_ENDPOINT": "127.0.0.1:0",
        "OTEL_BRIDGE_OTLP_HTTP_ENDPOINT": "127.0.0.1:0",
        "OTEL_BRIDGE_LOG_LEVEL": "info",
        "OTEL_BRIDGE_GRAPH_MAX_NODES": "300",
        "OTEL_BRIDGE_GRAPH_MAX_EDGES": "300",
    }
    proc = subprocess.Popen(
        [sys.executable, "-m", "otel_bridge", "run", "-c", str(CONFIGS / "local.yaml")],
        cwd=tmp_path,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    err = Stderr(proc, timeout=60)
    try:
        port = int(err.wait_for(_BANNER.pattern)[2])
        statuses = [
            post_traces(
                port,
                encode_traces([make_span(b * 200 + i) for i in range(200)]).SerializeToString(),
            )[0]
            for b in range(10)
        ]
    finally:
        proc.send_signal(signal.SIGINT)
        proc.wait(60)
    assert statuses == [200] * 10
    assert proc.returncode == 0, err.log()
    summary = json.loads((tmp_path / "otel-bridge-graph.json").read_text())["summary"]
    bounded = summary["bounded"]
    assert bounded["max_nodes"] == bounded["max_edges"] == 300
    assert summary["nodes"] <= 300
    assert bounded["dropped"] == 0
    spill = tmp_path / "otel-bridge-graph.spill"
    assert Path(bounded["spill"]).name == spill.name
    spilled = sum(len(frame[0]) for frame in read_frames(str(spill)))
    assert bounded["spilled"] == spilled > 0
    assert summary["observations"] + spilled >= 2000  # every span: applied or spilled
    assert "reached its bounds" in err.log()


def test_observe_moves_a_bundled_spill_file_into_its_run_directory(tmp_path: Path) -> None:
    """``observe -c FILE``: a graph's ``bounds.spill`` becomes ``graph[-NAME].spill`` in the run
    directory (never the standing collector's file), the other bounds kept."""
    run = rundir.RunDir.create(str(tmp_path / "run"))
    user = read_config(CONFIGS / "local.yaml")
    moved = {a.id: dict(a.settings) for a in durable_state_in_run(user, run)}
    bounds = moved["graph"]["bounds"]
    assert bounds["spill"] == run.file("graph.spill")
    assert bounds["max_nodes"] == user["exporters"]["graph"]["bounds"]["max_nodes"]
    user = {"exporters": {"graph/two": {"bounds": {"max_nodes": 5, "spill": "/srv/g.spill"}}}}
    moved = {a.id: dict(a.settings) for a in durable_state_in_run(user, run)}
    assert moved == {
        "graph/two": {"bounds": {"max_nodes": 5, "spill": run.file("graph-two.spill")}}
    }
