"""``Factory.durable_state``: each component that keeps state on disk names it, and ``observe``
moves what a ``-c`` file sets into the run directory through it, knowing no component itself."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from otel_bridge import rundir
from otel_bridge.commands.observe_run import durable_state_in_run


def test_every_durable_setting_of_the_bundled_components_goes_into_the_run(
    tmp_path: Path,
) -> None:
    run = rundir.RunDir.create(str(tmp_path / "run"))
    user: dict[str, Any] = {
        "exporters": {
            "graph": {"output": "g.json", "journal": {"path": "/var/x.journal", "fsync": True}},
            "graph/two": {"bounds": {"spill": "/var/spill", "max_nodes": 5}},
            "otlp": {"endpoint": "h:4317", "sending_queue": {"storage": "/var/q", "size": 3}},
            "otlphttp/b": {"sending_queue": {"enabled": True}},  # no storage: nothing moves
            "file": {"path": "./records.jsonl"},  # no durable state
        },
        "processors": {"enrich": {"journal": {"path": "/var/e"}}, "batch": {}},
        "receivers": {"otlp": {"protocols": {}}},
    }
    moved = {(a.section, a.id): a.settings for a in durable_state_in_run(user, run)}
    assert moved == {
        ("exporters", "graph"): {"journal": {"path": run.file("graph.journal"), "fsync": True}},
        ("exporters", "graph/two"): {
            "bounds": {"spill": run.file("graph-two.spill"), "max_nodes": 5}
        },
        ("exporters", "otlp"): {"sending_queue": {"storage": run.file("queue"), "size": 3}},
        ("processors", "enrich"): {"journal": {"path": run.file("queue")}},
    }
    assert durable_state_in_run(None, run) == []
