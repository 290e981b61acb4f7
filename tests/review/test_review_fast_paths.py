"""The review's fast readers agree with the full decodes they shortcut (differential tests).

``read_records`` reads the host receiver's OS event lines by substring search or by position
(``fast_os_line``, the block shortcut) and ``read_graph`` decodes ``graph.json`` straight into
light records; ``slow_line`` and ``read_graph_generic`` are the plain-JSON references. Every
record and every index entry must be the same, on the writer's own lines and on lines built to
fall off each shortcut (escapes, trace context, several records, odd field orders, ...).
"""

from __future__ import annotations

import io
from pathlib import Path

import orjson
import pytest
from review_support import RunBuilder, Session

from otel_bridge.model import LogRecord, Resource, Scope
from otel_bridge.otlp import json_codec
from otel_bridge.review import build_review
from otel_bridge.review.build import read_graph, read_graph_generic
from otel_bridge.review.records import (
    Records,
    blocks_of_lines,
    fast_os_line,
    read_records,
    slow_line,
)

OS = Resource(attributes={"evidence.channel": "os", "host.id": "h1", "service.name": "host"})
SCOPE = Scope(name="otel_bridge.receivers.host", version="0.1.0")


def _os_line(n: int, **kw: object) -> bytes:
    fields: dict[str, object] = {
        "time_unix_nano": 1_796_000_000_000_000_000 + n,
        "observed_time_unix_nano": 1_796_000_000_000_000_500 + n,
        "severity_number": 9,
        "event_name": "file.open",
        "attributes": {"evidence.record_id": f"linux:{n}", "file.path": f"/w/f{n}.py"},
    }
    fields.update(kw)
    record = LogRecord(resource=OS, scope=SCOPE, **fields)  # type: ignore[arg-type]
    return orjson.dumps(json_codec.encode_logs([record]))


def _variants() -> list[bytes]:
    """Writer lines, and lines that must leave each shortcut for the full decode."""
    plain = [_os_line(n) for n in range(40)]
    odd = [
        _os_line(100, attributes={"evidence.record_id": "linux:100", "file.path": 'a"b\\c'}),
        _os_line(101, trace_id=bytes(range(16)), span_id=bytes(range(8))),
        _os_line(102, event_name=""),
        _os_line(103, attributes={"file.path": "/w/no-record-id"}),
        _os_line(104, event_name="process.exec\u00e9"),
        orjson.dumps(
            json_codec.encode_logs(
                [LogRecord(resource=OS, scope=SCOPE, time_unix_nano=7, event_name="a")] * 2
            )
        ),
        orjson.dumps(
            json_codec.encode_logs(
                [LogRecord(resource=Resource(attributes={"service.name": "app"}), scope=SCOPE)]
            )
        ),
        b'{"resourceLogs":[{"resource":{"attributes":[{"key":"evidence.channel","value":'
        b'{"stringValue":"os"}}]},"scopeLogs":[{"logRecords":[{"eventName":"late.time",'
        b'"timeUnixNano":12,"attributes":[{"key":"evidence.record_id","value":'
        b'{"stringValue":"linux:x"}}]}]}]}]}',
        b'{"resourceLogs":[{"resource":{"attributes":[{"key":"evidence.channel","value":'
        b'{"stringValue":"os"}},{"key":"evidence.record_id","value":{"stringValue":"res"}}]},'
        b'"scopeLogs":[{"logRecords":[{"timeUnixNano":"5","eventName":"e"}]}]}]}',
        b'{"resourceLogs":[{"resource":{"attributes":[{"key":"evidence.channel","value":'
        b'{"stringValue":"os"}}]},"scopeLogs":[{"logRecords":[{"timeUnixNano":"12x"}]}]}]}',
        _os_line(105)[:-30],  # torn: cut while written
        _os_line(106).split(b',"eventName"')[0],
        b'{"not": "otlp"}',
        b"not json at all",
        b"   ",
        b"",
    ]
    # the odd lines between writer lines: each shortcut is learned, then must step aside
    return plain[:20] + odd + plain[20:]


def _reference(lines: list[bytes], name: str) -> Records:
    out = Records()
    for number, raw in enumerate(lines, start=1):
        if raw.strip():
            slow_line(out, name, number, raw)
    return out


@pytest.mark.parametrize("plain", [False, True])
def test_os_lines_read_fast_equal_the_full_decode(tmp_path: Path, plain: bool) -> None:
    lines = _variants()
    if plain:  # no escape and no trace context in the block: lines are read by shared prefix
        lines = [raw for raw in lines if b"\\" not in raw and b"traceId" not in raw]
    (tmp_path / "os.jsonl").write_bytes(b"\n".join(lines) + b"\n")
    fast, slow = read_records(str(tmp_path)), _reference(lines, "os.jsonl")
    assert [r.to_dict() for r in fast.records] == [r.to_dict() for r in slow.records]
    assert fast.by_os_record == slow.by_os_record
    assert fast.counts() == slow.counts()
    assert fast.counts()["os_event"] >= 44  # the writer's lines and the odd OS ones
    assert fast.counts()["coverage"] >= 4  # torn, not OTLP, not JSON


def test_fast_os_line_takes_only_lines_it_reads_exactly() -> None:
    taken = [raw for raw in _variants() if fast_os_line(raw) is not None]
    # the writer's lines, and the odd ones with no event name, no record id, a non-ASCII name,
    # an unquoted time after the event name
    assert len(taken) == 40 + 4
    assert fast_os_line(_os_line(7)) == (1_796_000_000_000_000_007, "file.open", "linux:7")


def test_blocks_split_lines_like_a_file_iterator() -> None:
    data = b"".join(b"line %d %s\n" % (n, b"x" * (n % 7)) for n in range(5000)) + b"tail"
    read = [line for lines, _ in blocks_of_lines(io.BytesIO(data)) for line in lines]
    assert read == [line.rstrip(b"\n") for line in io.BytesIO(data)]


def test_graph_read_typed_equals_the_plain_json_read(tmp_path: Path) -> None:
    session = Session(
        trace="33" * 16,
        task="Patch mod.py, then test it.",
        answer="I patched mod.py and `pytest -q` passes.",
        commands=[
            (["tee", "mod.py"], 0, [], ["/w/mod.py"]),
            (["pytest", "-q"], 0, ["/w/mod.py"], []),
        ],
    )
    builder = RunBuilder()
    builder.add(session, first_span=1000)
    run = builder.write(tmp_path / "run")
    path = run / "graph.json"
    typed, plain = read_graph(str(path)), read_graph_generic(str(path), path.read_bytes())
    assert typed.index.nodes == plain.index.nodes
    assert dict(typed.index.out) == dict(plain.index.out)
    assert dict(typed.index.into) == dict(plain.index.into)
    assert (typed.run, typed.summary) == (plain.run, plain.summary)
    before = orjson.dumps(build_review(str(run)), option=orjson.OPT_SORT_KEYS)
    # a graph written without retained support (null) falls back to the plain read
    doc = orjson.loads(path.read_bytes())
    for edge in doc["edges"]:
        edge["support"] = None
    path.write_bytes(orjson.dumps(doc))
    fallback = read_graph(str(path))
    assert all(e.support == () for edges in fallback.index.out.values() for e in edges)
    assert fallback.index.nodes == typed.index.nodes
    # the review rests on no OS record here, so it is unchanged
    assert orjson.dumps(build_review(str(run)), option=orjson.OPT_SORT_KEYS) == before
