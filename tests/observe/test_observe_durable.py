"""Issue 13: the bundled configs are durable by default, and ``observe -c`` keeps that state in
its run directory, never at the standing collector's paths."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from observe_support import observe_argv

from otel_bridge import rundir
from otel_bridge.commands.observe import RUN_QUEUE_DIR, durable_state_in_run
from otel_bridge.config import read_config
from otel_bridge.configs import __file__ as configs_init

CONFIGS = Path(configs_init).parent


def test_bundled_configs_turn_durability_on() -> None:
    """local.yaml journals its graph; phoenix.yaml and jaeger.yaml queue on disk."""
    local = read_config(CONFIGS / "local.yaml")
    assert local["exporters"]["graph"]["journal"]["path"]
    for name, exporter in (("phoenix", "otlphttp/phoenix"), ("jaeger", "otlp/jaeger")):
        queue = read_config(CONFIGS / f"{name}.yaml")["exporters"][exporter]["sending_queue"]
        assert queue["storage"]
        assert queue["fsync"] is False


def test_journals_and_queues_set_in_the_file_move_into_the_run_directory(tmp_path: Path) -> None:
    """Each journal path and queue storage the file sets is replaced by one in the run
    directory, the other settings kept; components without them are left alone."""
    run = rundir.RunDir.create(str(tmp_path / "run"))
    user = {
        "exporters": {
            "graph": {"journal": {"path": "/srv/g.journal", "max_bytes": 4096}},
            "graph/second": {"journal": {"path": "x.journal"}},
            "graph/plain": {"output": "g.json"},
            "otlp/jaeger": {"sending_queue": {"storage": "/srv/q", "fsync": False}},
            "otlphttp/nodisk": {"sending_queue": {"queue_size": 5}},
            "file": {"path": "r.jsonl"},
        }
    }
    moved = {a.id: dict(a.settings) for a in durable_state_in_run(user, run)}
    assert moved == {
        "graph": {"journal": {"path": run.file("graph.journal"), "max_bytes": 4096}},
        "graph/second": {"journal": {"path": run.file("graph-second.journal")}},
        "otlp/jaeger": {"sending_queue": {"storage": run.file(RUN_QUEUE_DIR), "fsync": False}},
    }
    assert durable_state_in_run(None, run) == []


def test_observe_with_the_bundled_config_journals_inside_its_run_directory(
    tmp_path: Path,
) -> None:
    """``observe -c configs/local.yaml``: the graph journal is the run directory's (0600), none
    is created (or replayed) in the working directory, and the run verifies."""
    work = tmp_path / "work"
    work.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    argv = observe_argv(tmp_path, "sh", "-c", "echo hi > out.txt", extra=("--no-forward",))
    argv[4:4] = ["-c", str(CONFIGS / "local.yaml")]
    done = subprocess.run(
        argv, cwd=work, env=env, capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr
    run = tmp_path / "run"
    journal = run / "graph.journal"
    assert journal.stat().st_mode & 0o777 == 0o600
    assert journal.stat().st_size > 8  # the header and at least one batch
    assert not (work / "otel-bridge-graph.journal").exists()
    assert rundir.verify(str(run)) == []
