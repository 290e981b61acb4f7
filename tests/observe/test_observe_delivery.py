"""``observe -c`` says what its file's exporters did not deliver, and where it is kept.

``otel-bridge observe -c configs/phoenix.yaml -- CMD`` with Phoenix not running: the exporter
keeps what it could not send in its persistent queue, which observe moves into the run
directory. The only word of it was a log line, "the next start with this storage sends them",
though no later ``observe`` uses that directory; the summary and report.md said nothing. The
summary now counts each delivering exporter's outcomes (``summary.json`` ``delivery``) and
warns, in the printed summary and report.md, about records not delivered.

Draining that queue (the documented way: ``otel-bridge run -c`` with the queue's storage, once
the destination is up) rewrites the queue's files after the manifest was written: ``verify``
then failed on a run whose only change was the drain. The manifest now records ``queue/`` as
mutable (its layout checked, not its bytes), and every other file as before.
"""

from __future__ import annotations

import json
import os
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest
from cli_support import run_cli
from observe_support import observe_in
from otlp_sink import Sink, sink
from waiting import start_run, wait_until

from otel_bridge.testing import free_port

CONFIG = Path(__file__).resolve().parents[2] / "configs" / "phoenix.yaml"


def test_records_kept_in_the_runs_queue_are_said(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "PHOENIX_"))}
    env["PHOENIX_COLLECTOR_ENDPOINT"] = f"http://127.0.0.1:{free_port()}"  # nobody listens
    done = observe_in(tmp_path, "true", extra=("-c", str(CONFIG)), env=env)
    assert done.returncode == 0, done.stderr
    run = tmp_path / "run"
    delivery = json.loads((run / "summary.json").read_text())["delivery"]
    phoenix = delivery["exporters"]["otlphttp/phoenix"]
    assert phoenix["delivered"] == 0, delivery
    assert phoenix["queued"] >= 1, delivery  # at least observe's own root span
    assert phoenix["storage"].startswith(str(run)), delivery
    (warning,) = delivery["warnings"]
    assert warning.startswith(f"otlphttp/phoenix did not deliver {phoenix['queued']} records")
    assert "no later `observe` sends" in warning
    assert f"warning: {warning}" in done.stderr
    assert f"**Warning:** {warning}." in (run / "report.md").read_text(encoding="utf-8")


@pytest.fixture
def destination() -> Iterator[Sink]:
    yield from sink()


def _queued_run(tmp_path: Path) -> Path:
    """``observe -c configs/phoenix.yaml`` with Phoenix down: records stay in the run's queue."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "PHOENIX_"))}
    env["PHOENIX_COLLECTOR_ENDPOINT"] = f"http://127.0.0.1:{free_port()}"  # nobody listens
    done = observe_in(tmp_path, "true", extra=("-c", str(CONFIG), "--no-review"), env=env)
    assert done.returncode == 0, done.stderr
    run = tmp_path / "run"
    phoenix = json.loads((run / "summary.json").read_text())["delivery"]["exporters"]
    assert phoenix["otlphttp/phoenix"]["queued"] >= 1, phoenix
    reviewed = run_cli("review", "--quiet", str(run))  # writes into the run, re-digests it
    assert reviewed.returncode == 0, reviewed.stderr
    manifest = json.loads((run / "manifest.json").read_text())
    assert "review.json" in manifest["files"]
    assert manifest["mutable"] == ["queue"]  # kept by the re-digest
    return run


def test_a_drained_queue_still_verifies_and_other_tampering_does_not(
    tmp_path: Path, destination: Sink
) -> None:
    """The drain the warning names (a collector whose storage is the run's ``queue/``, with
    the destination up) sends the kept records and rewrites the queue's files; ``verify`` still
    passes and says ``queue/`` is not covered; changing any other file, or putting anything
    but the queue's own files under ``queue/``, still fails it."""
    run = _queued_run(tmp_path)
    queue = run / "queue" / "exporter_otlphttp_phoenix"
    before = {p.name: p.read_bytes() for p in queue.iterdir()}
    (tmp_path / "standing").mkdir()
    proc, err = start_run(
        CONFIG,
        {
            "PHOENIX_COLLECTOR_ENDPOINT": f"http://127.0.0.1:{destination.http_port}",
            "OTEL_BRIDGE_QUEUE_DIR": str(run / "queue"),
            "OTEL_BRIDGE_OTLP_GRPC_ENDPOINT": f"127.0.0.1:{free_port()}",
            "OTEL_BRIDGE_OTLP_HTTP_ENDPOINT": f"127.0.0.1:{free_port()}",
        },
        cwd=tmp_path / "standing",
    )
    try:
        wait_until(lambda: destination.of("traces"), 60, "the kept records delivered")
    finally:
        proc.send_signal(signal.SIGINT)
        assert proc.wait(60) == 0, err.log()
    assert {p.name: p.read_bytes() for p in queue.iterdir()} != before  # drained: acked
    done = run_cli("verify", str(run))
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [
        f"{run}: OK",
        f"{run}: queue/ not covered by the manifest: persistent queues a later collector may "
        "drain (their layout was checked, not their bytes)",
    ]
    (run / "queue" / "notes.txt").write_text("x")
    (queue / "wal.log.tmp").symlink_to("/etc/passwd")
    with (run / "sem.jsonl").open("a") as f:
        f.write("{}\n")
    done = run_cli("verify", str(run))
    assert done.returncode == 1
    assert done.stderr.splitlines() == [
        f"{run}: modified: sem.jsonl",
        f"{run}: unexpected: queue/exporter_otlphttp_phoenix/wal.log.tmp (symbolic link to "
        "/etc/passwd)",
        f"{run}: unexpected: queue/notes.txt",
        f"{run}: FAILED (3 problem(s))",
    ]
