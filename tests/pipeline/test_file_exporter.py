"""The ``file`` exporter: JSON lines, OTLP/JSON for telemetry, private modes, flushing."""

from __future__ import annotations

import json
import os
import stat
import threading
from collections import Counter
from pathlib import Path
from typing import Any

import msgspec
import pytest

from otel_bridge import jsonl
from otel_bridge.component import CreateSettings, Host, Telemetry
from otel_bridge.config import parse_config
from otel_bridge.errors import StartupError
from otel_bridge.exporters.file import (
    Config,
    FileExporter,
    decode_line,
    encode_lines,
    factory,
    read_batch,
)
from otel_bridge.exporters.file.exporter import written_before
from otel_bridge.model import (
    Batch,
    Channel,
    CoverageRecord,
    EmitterFacts,
    Entity,
    EntityKind,
    Observation,
    RelationKind,
    Resource,
    Scope,
    Source,
    TransportPeer,
)
from otel_bridge.otlp import json_codec
from otel_bridge.pipeline import Collector
from otel_bridge.testing import ListReceiver, double_registry, make_log, make_span

SOURCE = Source(channel=Channel.OS, backend="portable", record_id="p:1")
OBS = Observation(
    id="p:1#0",
    time_unix_nano=3,
    source=SOURCE,
    subject=Entity(kind=EntityKind.FILE, id="file:/tmp/x", attrs={"n": 1}),
)
COV = CoverageRecord(source=SOURCE, reason="unparsed", detail="bad record")
FULL = Batch(
    spans=(make_span(1), make_span(2)), logs=(make_log(1),), observations=(OBS,), coverage=(COV,)
)


def exporter(path: Path, **kw: Any) -> FileExporter:
    """A started file exporter writing to ``path``."""
    exp = factory.create(CreateSettings(id="file"), Config(path=str(path), **kw), None)
    assert isinstance(exp, FileExporter)
    exp.start(Host())
    return exp


def test_writes_one_record_per_line_and_reads_back(tmp_path: Path) -> None:
    """Every record is one JSON line; reading the file gives back the same records."""
    path = tmp_path / "out.jsonl"
    exp = exporter(path)
    exp.consume(FULL)
    exp.shutdown()
    lines = path.read_text().splitlines()
    assert len(lines) == 5
    kinds = [next(iter(json.loads(line))) for line in lines]
    assert kinds == ["resourceSpans", "resourceSpans", "resourceLogs", "observation", "coverage"]
    assert read_batch(path) == FULL


def test_span_lines_are_otlp_json(tmp_path: Path) -> None:
    """A span line is an OTLP/JSON export request: hex ids, string nanos, resource attributes."""
    path = tmp_path / "s.jsonl"
    exp = exporter(path)
    exp.consume(Batch(spans=(make_span(1),)))
    exp.shutdown()
    line = json.loads(path.read_text())
    rs = line["resourceSpans"][0]
    span = rs["scopeSpans"][0]["spans"][0]
    assert span["traceId"] == make_span(1).trace_id.hex()
    assert span["spanId"] == make_span(1).span_id.hex()
    assert span["name"] == "span-1"
    assert {"key": "service.name", "value": {"stringValue": "test"}} in rs["resource"]["attributes"]


def test_signals_select_parts(tmp_path: Path) -> None:
    """Only the configured signals are written."""
    path = tmp_path / "o.jsonl"
    exp = exporter(path, signals=["observations", "coverage"])
    exp.consume(FULL)
    exp.consume(Batch(spans=(make_span(3),)))
    exp.shutdown()
    assert read_batch(path) == Batch(observations=(OBS,), coverage=(COV,))


def test_private_modes(tmp_path: Path) -> None:
    """The file is created 0600 and missing directories 0700."""
    path = tmp_path / "a" / "b" / "out.jsonl"
    exp = exporter(path)
    exp.shutdown()
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    assert stat.S_IMODE(os.stat(tmp_path / "a").st_mode) == 0o700
    assert stat.S_IMODE(os.stat(tmp_path / "a" / "b").st_mode) == 0o700


def _obs(n: int) -> Observation:
    """``OBS`` at another time: another observation."""
    return msgspec.structs.replace(OBS, id=f"p:{n}#0", time_unix_nano=n)


def test_truncate_or_append(tmp_path: Path) -> None:
    """By default an existing file is replaced; with append it grows."""
    path = tmp_path / "x.jsonl"
    for n in range(2):
        exp = exporter(path)
        exp.consume(Batch(observations=(_obs(n),)))
        exp.shutdown()
    assert len(path.read_text().splitlines()) == 1
    for n in range(2, 4):
        exp = exporter(path, append=True)
        exp.consume(Batch(observations=(_obs(n),)))
        exp.shutdown()
    assert len(path.read_text().splitlines()) == 3


def test_a_batch_resent_after_a_kill_is_written_once(tmp_path: Path) -> None:
    """A collector killed after its file took a batch and before the sender learned it (a
    gateway whose keys were not yet committed): the sender resends it after the restart. Its
    lines are written once; what is new is written; a record repeated later is written again."""
    path = tmp_path / "x.jsonl"
    first = exporter(path, append=True, flush_interval=0)
    first.consume(Batch(observations=(_obs(1),)))
    first.consume(FULL)  # then killed: no shutdown (flush_interval 0: the lines are written)
    written = path.read_text()

    telemetry = Telemetry()
    second = factory.create(
        CreateSettings(id="file", telemetry=telemetry),
        Config(path=str(path), append=True, flush_interval=0),
        None,
    )
    assert isinstance(second, FileExporter)
    second.start(Host())
    fresh = _obs(9)
    second.consume(Batch(observations=(fresh, *FULL.observations), coverage=FULL.coverage))
    second.consume(Batch(spans=FULL.spans, logs=FULL.logs))  # the rest of the resend
    assert telemetry.total("resent_dropped", kind="exporter") == len(FULL)
    assert path.read_text() == written + encode_lines(Batch(observations=(fresh,)))[0] + "\n"
    second.consume(FULL)  # again, now that the copies were recognised: written
    second.shutdown()
    first.shutdown()  # only closes its handle: everything it had was written before
    once = Batch(observations=(_obs(1),))
    assert read_batch(path) == Batch.concat([once, FULL, Batch(observations=(fresh,)), FULL])


def _delivered(port: int, at: int) -> Observation:
    """A span's observation as one delivery carried it: the request's transport peer (its
    connection and arrival time) is in the source."""
    peer = TransportPeer(
        protocol="grpc",
        address="127.0.0.1",
        port=port,
        local_port=4317,
        host_id="h",
        time_unix_nano=at,
    )
    source = Source(
        channel=Channel.SEM,
        backend="otlp",
        record_id="0a0b#0",
        emitter=EmitterFacts(pid=7, peer=peer),
        trace_id="0a" * 16,
        span_id="0a0b",
    )
    return msgspec.structs.replace(OBS, id="0a0b#0", source=source)


def test_a_resent_observation_is_recognised_whatever_connection_carried_it(
    tmp_path: Path,
) -> None:
    """The resend of a span after a restart comes on a new connection at a new time: its
    observation's transport peer differs, and it is still the observation already written.
    Another observation that differs in anything else is written."""
    path = tmp_path / "x.jsonl"
    first = exporter(path, append=True, flush_interval=0)
    first.consume(Batch(observations=(_delivered(40000, 1),)))
    first.shutdown()
    second = exporter(path, append=True, flush_interval=0)
    other = msgspec.structs.replace(_delivered(40002, 3), time_unix_nano=99)
    second.consume(Batch(observations=(_delivered(40001, 2), other)))
    second.shutdown()
    lines = path.read_text().splitlines()
    assert [json.loads(x)["observation"]["time_unix_nano"] for x in lines] == [3, 99]
    assert json.loads(lines[0])["observation"]["source"]["emitter"]["peer"]["port"] == 40000


def test_only_the_files_end_is_read_back(tmp_path: Path) -> None:
    """``written_before`` reads whole lines from the last ``limit`` bytes: the line cut by the
    window's start is not one of them."""
    path = tmp_path / "x.jsonl"
    path.write_text("first line\nsecond\nthird\n")
    with path.open("rb") as f:
        assert written_before(f.fileno()) == Counter(
            hash(x) for x in ("first line", "second", "third")
        )
        assert written_before(f.fileno(), limit=len("ne\nsecond\nthird\n")) == Counter(
            hash(x) for x in ("second", "third")
        )


def test_append_after_a_torn_line_starts_a_new_line(tmp_path: Path) -> None:
    """A collector killed mid-write leaves a line without its newline; appending ends it first,
    so the records written after the restart stay whole lines."""
    path = tmp_path / "x.jsonl"
    exp = exporter(path, append=True)
    exp.consume(Batch(observations=(OBS,)))
    exp.shutdown()
    whole = path.read_text()
    path.write_text(whole + whole[: len(whole) // 2])  # the kill: half of a second line
    exp = exporter(path, append=True)
    exp.consume(Batch(observations=(_obs(2),)))
    exp.shutdown()
    lines = path.read_text().split("\n")
    assert lines[0] == whole.rstrip("\n")  # before and after: whole records
    assert json.loads(lines[2])["observation"]["id"] == "p:2#0"
    assert lines[1] == whole[: len(whole) // 2]  # the torn line, alone
    assert lines[3] == ""


def test_periodic_flush_makes_lines_visible(tmp_path: Path) -> None:
    """With a short flush_interval, lines reach the file before shutdown."""
    path = tmp_path / "f.jsonl"
    exp = exporter(path, flush_interval=0.01)
    exp.consume(Batch(observations=(OBS,)))
    for _ in range(300):
        if path.read_text():
            break
        threading.Event().wait(0.01)
    assert path.read_text().count("\n") == 1
    exp.shutdown()


def test_flush_interval_zero_writes_through(tmp_path: Path) -> None:
    """flush_interval 0 flushes after every batch."""
    path = tmp_path / "w.jsonl"
    exp = exporter(path, flush_interval=0)
    exp.consume(Batch(coverage=(COV,)))
    assert path.read_text().count("\n") == 1
    exp.shutdown()


def test_unwritable_path_fails_start(tmp_path: Path) -> None:
    """A path that cannot be opened is a StartupError naming it."""
    blocker = tmp_path / "file"
    blocker.write_text("")
    exp = factory.create(
        CreateSettings(id="file"), Config(path=str(blocker / "sub" / "x.jsonl")), None
    )
    with pytest.raises((StartupError, OSError)):
        exp.start(Host())
    exp.shutdown()


def test_lifecycle_edges(tmp_path: Path) -> None:
    """Shutdown before start and twice is safe; consume after shutdown is an error."""
    exp = FileExporter(Config(path=str(tmp_path / "n.jsonl")), name="f", telemetry=Telemetry())
    exp.shutdown()
    exp.shutdown()
    with pytest.raises(RuntimeError, match="not started"):
        exp.consume(Batch(observations=(OBS,)))
    assert not (tmp_path / "n.jsonl").exists()


def test_decode_line_errors() -> None:
    """Lines that are not records written by the exporter are decode errors."""
    from otel_bridge.errors import DecodeError

    with pytest.raises(DecodeError, match="not JSON"):
        decode_line("{")
    with pytest.raises(DecodeError, match="unknown record"):
        decode_line('{"metrics": 1}')
    with pytest.raises(DecodeError, match="expected a JSON object"):
        decode_line("[]")


def test_encode_lines_is_pure() -> None:
    """encode_lines returns the same lines for the same batch and parts."""
    assert encode_lines(FULL) == encode_lines(FULL)
    assert encode_lines(FULL, ["logs"]) == encode_lines(Batch(logs=FULL.logs))


def test_in_a_collector_with_concurrent_writers(tmp_path: Path) -> None:
    """Shared by two pipelines and fed from several threads, every record is one intact line."""
    path = tmp_path / "c.jsonl"
    cfg = parse_config(
        {
            "receivers": {"list": None},
            "exporters": {"file": {"path": str(path)}},
            "service": {
                "pipelines": {
                    "traces": {"receivers": ["list"], "exporters": ["file"]},
                    "logs": {"receivers": ["list"], "exporters": ["file"]},
                }
            },
        },
        env={},
        registry=double_registry(factory),
    )
    collector = Collector(cfg)
    collector.start()
    receiver = collector.component("list")
    assert isinstance(receiver, ListReceiver)

    def worker(w: int) -> None:
        for i in range(50):
            receiver.emit(Batch(spans=(make_span(w * 100 + i),), logs=(make_log(w * 100 + i),)))

    threads = [threading.Thread(target=worker, args=(w,)) for w in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    collector.shutdown()
    back = read_batch(path)
    assert len(back.spans) == 200
    assert len(back.logs) == 200
    assert {s.name for s in back.spans} == {
        f"span-{w * 100 + i}" for w in range(4) for i in range(50)
    }


def test_lines_equal_one_request_per_record() -> None:
    """Each span and log line is exactly ``jsonl.dumps`` of a one-record OTLP/JSON request,
    although resources and scopes are encoded once per batch: with shared and equal-but-distinct
    resources, schema URLs on either level, and non-ASCII text."""
    shared = Resource(attributes={"service.name": "svc", "host.id": "h"})
    resources = [
        shared,
        Resource(attributes={"service.name": "svc", "host.id": "h"}),
        Resource(attributes={"service.name": "ünï"}, schema_url="https://opentelemetry.io/s/1"),
    ]
    scopes = [Scope(name="a"), Scope(name="b", version="2", schema_url="https://x/é")]
    spans = [
        make_span(n, resource=resources[n % 3], scope=scopes[n % 2], name=f"s-{n}-ß")
        for n in range(12)
    ]
    logs = [make_log(n, resource=resources[n % 3], scope=scopes[n // 3 % 2]) for n in range(12)]
    lines = encode_lines(Batch(spans=tuple(spans), logs=tuple(logs)), ("spans", "logs"))
    expected = [jsonl.dumps(json_codec.encode_traces((s,))) for s in spans]
    expected += [jsonl.dumps(json_codec.encode_logs((r,))) for r in logs]
    assert lines == expected


def test_observation_lines_share_entity_encodings_without_changing_them() -> None:
    """Observations sharing one entity object (as a process's events do) give the same lines
    as each observation encoded alone."""
    proc = Entity(kind=EntityKind.PROCESS, id="proc:h:1:2", label="sh", attrs={"pid": 1})
    files = [Entity(kind=EntityKind.FILE, id=f"file:/t/{n}", attrs={"n": n}) for n in range(3)]
    observations = [
        Observation(
            id=f"o{n}",
            time_unix_nano=n,
            source=SOURCE,
            subject=proc,
            relation=RelationKind.OPENED if n % 2 else None,
            object=files[n % 3] if n % 2 else None,
        )
        for n in range(9)
    ]
    lines = encode_lines(Batch(observations=tuple(observations)), ("observations",))
    assert lines == [
        jsonl.dumps({"observation": jsonl.observation_to_dict(o)}) for o in observations
    ]
    assert [decode_line(line).observations[0] for line in lines] == observations
