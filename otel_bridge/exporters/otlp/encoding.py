"""Encoding of export requests: records in, request bytes out. Pure functions, no transport."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Literal

from otel_bridge.model import LogRecord, Span
from otel_bridge.otlp import json_codec, proto_codec

Encoding = Literal["proto", "json"]


def encode_spans(spans: Sequence[Span], encoding: Encoding = "proto") -> bytes:
    """An ``ExportTraceServiceRequest`` carrying ``spans``, as protobuf or OTLP/JSON bytes."""
    if encoding == "json":
        return json.dumps(json_codec.encode_traces(spans), separators=(",", ":")).encode()
    payload: bytes = proto_codec.encode_traces(spans).SerializeToString()
    return payload


def encode_log_records(logs: Sequence[LogRecord], encoding: Encoding = "proto") -> bytes:
    """An ``ExportLogsServiceRequest`` carrying ``logs``, as protobuf or OTLP/JSON bytes."""
    if encoding == "json":
        return json.dumps(json_codec.encode_logs(logs), separators=(",", ":")).encode()
    payload: bytes = proto_codec.encode_logs(logs).SerializeToString()
    return payload
