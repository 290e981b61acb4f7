"""The per-OS-record path writes the same bytes: a recorded stream through observe's pipelines.

``testdata/os_outputs/os.jsonl.gz`` is the OS stream of a real ``observe`` of a small workload
(files written and read back, ``true`` children, a secret in a child's argv, a non-ASCII and a
secret-looking file name, a refused connection) and ``sem.jsonl`` its root span. This test feeds
them, plus records with edge values built here (a ``1`` where a Boolean belongs, a number as a
record id, no record id, a missing pid, an unknown event, collection states, a file change, a
number too wide for 64 bits, a tiny float, a non-OS log record), to the collector ``observe``
builds (the same overlay, the same loader), as the host and OTLP receivers would hand them over,
and then reviews the run directory as ``observe`` does. Every file written (``os.jsonl``,
``correlated.jsonl``, ``graph.json``, the review's files; the run directory's own path left
out) must have the SHA-256 recorded in
``golden.json``, first written by the code before the per-record shortcuts (main at f4beb00),
and rewritten only for a change of the outputs made on purpose, after a diff of the files
showed that change alone (the last: ``review.md`` saying "No agent session in this run" for
this run without GenAI spans). Run this module as a script with a tree first on ``PYTHONPATH`` to
write it with that tree.

``report.md`` is made from ``graph.json`` and the run summary alone, so an equal graph gives an
equal report.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import msgspec

from otel_bridge import rundir
from otel_bridge.commands.observe_run import build_overlay
from otel_bridge.config import parse_config
from otel_bridge.exporters.file.codec import decode_line
from otel_bridge.model import Batch, LogRecord, Resource, Scope
from otel_bridge.pipeline import Collector
from otel_bridge.review.build import write_review

DATA = Path(__file__).resolve().parent.parent / "testdata" / "os_outputs"
GOLDEN = DATA / "golden.json"
OUTPUTS = (
    "os.jsonl",
    "correlated.jsonl",
    "graph.json",
    "review.json",
    "review.md",
    "review-records.jsonl",
)
_CHUNK = 50
"""Records per batch (the stream is cut so that batches hold several resources' records)."""


def _recorded() -> list[LogRecord]:
    """The recorded stream, its records sharing one resource object per distinct resource (as
    the host receiver's do)."""
    shared: dict[bytes, Resource] = {}
    out: list[LogRecord] = []
    with gzip.open(DATA / "os.jsonl.gz", "rt", encoding="utf-8") as f:
        for line in f:
            for record in decode_line(line).logs:
                key = msgspec.json.encode(record.resource)
                resource = shared.setdefault(key, record.resource)
                out.append(msgspec.structs.replace(record, resource=resource))
    return out


def _edges(template: LogRecord) -> list[LogRecord]:
    """Records with values the shortcuts must treat exactly as the general code does."""
    base = dict(template.attributes)
    pid = base["process.pid"]
    other = Resource(
        attributes={**template.resource.attributes, "evidence.backend": "strace", "host.id": 7}
    )
    plain = Resource(attributes={"service.name": "not-os"})

    def record(name: str, resource: Resource | None = None, /, **attrs: Any) -> LogRecord:
        merged = {**base, **attrs}
        return msgspec.structs.replace(
            template,
            resource=resource or template.resource,
            event_name=name,
            attributes={k: v for k, v in merged.items() if v is not ...},
        )

    return [
        record("file.open", **{"evidence.causal": 1, "file.path": "/tmp/edge/one"}),
        record("file.open", **{"evidence.causal": "true", "evidence.attribution": "nonsense"}),
        record("file.write", **{"evidence.record_id": 12345, "file.size": 2**70}),
        record("file.read", **{"evidence.record_id": ..., "file.ratio": 0.00001}),
        record("file.read", **{"evidence.record_id": "", "process.pid": str(pid)}),
        record("file.open", **{"process.pid": ..., "file.path": ...}),
        record("file.open", **{"file.path": ...}),
        record("file.rename", **{"file.new_path": "/tmp/edge/two", "process.pid": True}),
        record("no.such.event"),
        record("", **{"event.name": "file.delete", "evidence.inferred": False}),
        record("collection.state", **{"collection.name": "files", "collection.state": "lost"}),
        record("file.change", **{"file.change.type": "modified"}),
        record("network.connect", **{"network.peer.address": "10.0.0.9", "network.peer.port": 80}),
        record("network.listen", **{"network.local.address": "0.0.0.0", "network.local.port": 8}),
        record("file.open", other, **{"evidence.identity_exact": True, "file.path": "/x"}),
        record(
            "process.start",
            **{
                "process.parent_pid": 1,
                "process.executable.path": "/bin/sh",
                "process.command_args": ("sh", "-c", "curl -H 'Authorization: Bearer abc.def'"),
            },
        ),
        record("process.exec", **{"process.command_args": ("x", 1), "evidence.causal": None}),
        record("file.open", plain),
        msgspec.structs.replace(template, scope=Scope(name="other", version="9")),
    ]


def _batches() -> Iterator[Batch]:
    records = _recorded()
    template = next(r for r in records if r.event_name == "file.open")
    stream = records[:100] + _edges(template) + records[100:] + _edges(template)
    for i in range(0, len(stream), _CHUNK):
        yield Batch(logs=tuple(stream[i : i + _CHUNK]))


def replay(out: Path) -> dict[str, str]:
    """Run the recorded stream through observe's collector into run directory ``out``; the
    SHA-256 of each file of :data:`OUTPUTS`."""
    run = rundir.RunDir.create(str(out))
    overlay, wiring = build_overlay(run, "replayed-run", backend="linux")
    collector = Collector(parse_config(None, overlay=overlay, origin="<test>"))
    collector.host.run_dir = run.path
    started = [*collector.exporters.values()]
    for pipeline in collector.config.pipelines:
        started += collector.processors(pipeline)
    for component in started:
        component.start(collector.host)
    with open(DATA / "sem.jsonl", encoding="utf-8") as f:
        for line in f:
            collector.inject(wiring.otlp, decode_line(line))
    for batch in _batches():
        collector.inject(wiring.host, batch)
    for component in reversed(started):
        component.shutdown()
    write_review(run.path)
    where = run.path.encode()  # the review names the run directory: not part of the output
    return {
        name: hashlib.sha256((out / name).read_bytes().replace(where, b"<run>")).hexdigest()
        for name in OUTPUTS
    }


def test_a_recorded_stream_gives_the_recorded_outputs(tmp_path: Path) -> None:
    golden = json.loads(GOLDEN.read_text())
    assert replay(tmp_path / "run") == golden


def test_the_replay_is_deterministic(tmp_path: Path) -> None:
    """The golden hashes can only hold if two replays of one tree agree."""
    assert replay(tmp_path / "a") == replay(tmp_path / "b")


if __name__ == "__main__":  # write golden.json with the tree first on PYTHONPATH
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        hashes = replay(Path(tmp) / "run")
    GOLDEN.write_text(json.dumps(hashes, indent=2) + "\n")
    print(json.dumps(hashes, indent=2), file=sys.stderr)
    os._exit(0)
