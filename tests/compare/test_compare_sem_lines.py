"""compare reads a run's ``sem.jsonl``: a line it cannot take whole is an error naming the line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from otlp_fixtures import make_span

from otel_bridge.compare.inputs import read_streams
from otel_bridge.errors import DecodeError
from otel_bridge.otlp import json_codec


def test_a_span_line_with_a_rejected_span_is_an_error_naming_the_line(tmp_path: Path) -> None:
    """The decoder rejects a span with a bad trace id alone; compare, which must not count a
    run from part of its spans, refuses the file at that line instead of dropping the span."""
    good = json_codec.encode_traces([make_span(1)])
    bad = json_codec.encode_traces([make_span(2)])
    bad["resourceSpans"][0]["scopeSpans"][0]["spans"][0]["traceId"] = "bad"
    path = tmp_path / "sem.jsonl"
    path.write_text(json.dumps(good) + "\n" + json.dumps(bad) + "\n", encoding="utf-8")
    with pytest.raises(DecodeError, match=r"sem\.jsonl:2: rejected 1 invalid spans: .*traceId"):
        read_streams(path)
    path.write_text(json.dumps(good) + '\n{"resourceSpans": 5}\n', encoding="utf-8")
    with pytest.raises(DecodeError, match=r"sem\.jsonl:2: resourceSpans: expected an array"):
        read_streams(path)
    path.write_text(json.dumps(good) + "\n", encoding="utf-8")
    spans, logs = read_streams(path)
    assert [s.name for s in spans] == ["span-1"]
    assert logs == []
