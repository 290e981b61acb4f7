"""The ``file`` exporter's remembering encoder writes exactly the lines of ``encode_lines``.

:class:`~otel_bridge.exporters.file.codec.LineEncoder` reuses the text of resources, scopes,
attribute values, entities and evidence across batches. Every kind of value is encoded by both,
batch after batch (so the second time comes from the memos), including the values the fast path
must hand to the general code: a lone surrogate, an integer beyond 64 bits, a float the standard
library spells differently, a non-string key, and ``True`` and ``1`` under one key.
"""

from __future__ import annotations

import math

import pytest

from otel_bridge.exporters.file.codec import ALL_PARTS, LineEncoder, encode_lines
from otel_bridge.model import (
    AnyValue,
    Attribution,
    Batch,
    Channel,
    CoverageRecord,
    Entity,
    EntityKind,
    Evidence,
    FileFacts,
    LogRecord,
    Observation,
    ProcessFacts,
    RelationKind,
    Resource,
    Scope,
    Source,
)
from otel_bridge.testing import make_span

VALUES: tuple[AnyValue, ...] = (
    "plain",
    "",
    "caf\u00e9 \u00fcber \U0001f600",
    'quote " and \\ and \n',
    "lone \ud800 surrogate",
    0,
    1,
    True,
    False,
    -(2**63),
    2**63 - 1,
    2**64,
    -(2**70),
    1.5,
    0.00001,
    1e300,
    math.nan,
    math.inf,
    b"\x00\xff",
    ("a", "b"),
    ("a", 1, True, None),
    (),
    {"k": "v", "n": 2},
    {"nested": {"deep": ("x", 0.0001)}},
    None,
)

RESOURCES = (
    Resource(attributes={"evidence.channel": "os", "host.id": "h1"}),
    Resource(attributes={"evidence.channel": "os", "host.id": "h2"}, schema_url="https://s/1"),
    Resource(attributes={"weird": "\ud801"}),
)
SCOPES = (Scope(name="a"), Scope(name="b", version="2", schema_url="https://s/2"))


def _logs() -> list[LogRecord]:
    logs: list[LogRecord] = []
    for i, value in enumerate(VALUES):
        for key in ("evidence.record_id", "file.path", "evidence.causal"):
            logs.append(
                LogRecord(
                    resource=RESOURCES[i % len(RESOURCES)],
                    scope=SCOPES[i % len(SCOPES)],
                    time_unix_nano=i,
                    observed_time_unix_nano=i + 1,
                    severity_number=i % 3,
                    severity_text="INFO" if i % 2 else "",
                    body=value if i % 4 == 0 else None,
                    attributes={"process.pid": 42, key: value, "n": i},
                    dropped_attributes_count=i % 2,
                    flags=i % 2,
                    trace_id=bytes(16) if i % 5 == 0 else b"\x01" * 16,
                    span_id=b"" if i % 3 else b"\x02" * 8,
                    event_name="file.open" if i % 2 else "",
                )
            )
    logs.append(LogRecord(resource=RESOURCES[0], scope=SCOPES[0], attributes={1: "x"}))  # type: ignore[dict-item]
    return logs


def _observations() -> list[Observation]:
    process = Entity(
        kind=EntityKind.PROCESS,
        id="process:h:1:2",
        label="p (1)",
        attrs={"process.pid": 1},
        facts=ProcessFacts(host_id="h", pid=1, start_time_ms=2, argv=("p", "\u00e9")),
        key="process:?:p \u00e9",
    )
    out: list[Observation] = []
    for i, value in enumerate(VALUES):
        thing = Entity(
            kind=EntityKind.FILE,
            id=f"file:/f{i % 3}",
            label=f"/f{i % 3}",
            attrs={"file.path": f"/f{i % 3}", "v": value},
            facts=FileFacts(path=f"/f{i % 3}"),
            key="file:/f",
        )
        evidence = Evidence(
            attribution=Attribution.SYSCALL if i % 2 else None,
            causal=True,
            score=value if isinstance(value, float) else None,
            support=("a", "b") if i % 3 else (),
        )
        out.append(
            Observation(
                id=f"r{i}#0",
                time_unix_nano=i,
                source=Source(
                    channel=Channel.OS, backend="linux", record_id=f"r{i}", event="file.open"
                ),
                subject=process,
                relation=RelationKind.OPENED if i % 5 else None,
                object=thing if i % 5 else None,
                evidence=evidence,
                occurrence=f"r{i}",
                attrs={"event.name": "file.open", "v": value},
            )
        )
    return out


def _batches() -> list[Batch]:
    logs, observations = _logs(), _observations()
    coverage = (
        CoverageRecord(
            source=Source(channel=Channel.OS, backend="b", record_id="c"),
            reason="why",
            detail="\u00e9",
        ),
    )
    spans = (make_span(1), make_span(2, attributes={"v": 2**70}))
    whole = Batch(spans=spans, logs=tuple(logs), observations=tuple(observations))
    return [
        whole,
        whole,  # the same objects again: from the memos
        Batch(logs=tuple(reversed(logs)), coverage=coverage),
        Batch(observations=tuple(reversed(observations))),
        *(Batch(logs=(r,)) for r in logs[:12]),
    ]


@pytest.mark.parametrize(
    "parts", [ALL_PARTS, ("logs",), ("observations", "coverage"), ("spans", "logs")]
)
def test_remembered_lines_equal_the_general_encoding(parts: tuple[str, ...]) -> None:
    encoder = LineEncoder(parts)
    for batch in _batches():
        assert encoder.encode(batch) == encode_lines(batch, parts)


def test_true_and_one_under_one_key_stay_apart() -> None:
    encoder = LineEncoder(("logs",))
    for value in (True, 1, 1, True, "1", 1.0):
        record = LogRecord(resource=RESOURCES[0], scope=SCOPES[0], attributes={"k": value})
        [line] = encoder.encode(Batch(logs=(record,)))
        assert line == encode_lines(Batch(logs=(record,)), ("logs",))[0]
