"""The standing fuzz suite's targets: one input strategy and one property check per target.

Shared by ``tests/fuzz`` (a few dozen examples each, in the normal suite) and
``benchmarks/fuzz.py`` (thousands, printing inputs tried and failures). A check returns normally
when the property holds and raises ``AssertionError`` (or the unexpected exception) when not:

* ``os_strings``: any bytes or text an OS may hand out, through the host receiver's record
  factory, gives a record every writer accepts (valid UTF-8 JSON), replaced and flagged by the
  rule of ``docs/strings.md``, with the raw text recoverable from its escaped form;
* ``config``: any mutation of a valid configuration file loads or fails with ``ConfigError``;
* ``otlp_json`` / ``otlp_proto``: any body decodes or fails with a decode error, and every
  record accepted can be written as UTF-8 JSON (no poison record gets past the edge);
* ``http`` / ``grpc``: the real receiver answers any body with a non-5xx status (gRPC: not
  INTERNAL/UNKNOWN) and keeps serving.
"""

from __future__ import annotations

import json
import re
import tempfile
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import google.protobuf.message
import grpc
import hypothesis.strategies as st

from otel_bridge import jsonl, strings
from otel_bridge.component import CreateSettings, Host
from otel_bridge.config import load_config
from otel_bridge.errors import ConfigError, PermanentError
from otel_bridge.exporters.file import decode_line, encode_lines
from otel_bridge.model import AnyValue, Batch, LogRecord, Resource, Scope, Span
from otel_bridge.otlp import json_codec, proto_codec
from otel_bridge.receivers.host.events import Emitter, EventFactory
from otel_bridge.receivers.otlp import OtlpReceiver, factory
from otel_bridge.receivers.otlp.config import (
    GrpcConfig,
    HttpConfig,
    OtlpReceiverConfig,
    Protocols,
)
from otel_bridge.testing import RecordingConsumer

# --------------------------------------------------------------------------------------------
# OS-sourced strings
# --------------------------------------------------------------------------------------------

_ANY_CHAR = st.characters(codec=None, categories=None)
"""Every code point, lone surrogates included."""
os_text = st.one_of(
    st.binary(max_size=40).map(strings.from_bytes),  # what os.fsdecode / surrogateescape give
    st.text(_ANY_CHAR, max_size=20),
)
os_attributes = st.dictionaries(
    os_text,
    st.one_of(
        os_text,
        st.tuples(os_text, os_text),
        st.dictionaries(os_text, os_text, max_size=3),
        st.integers(-(2**63), 2**63 - 1),  # OTLP's int64
    ),
    max_size=4,
)

_ESCAPE = re.compile(r"\\\\|\\x([0-9a-f]{2})|\\u(d[89a-f][0-9a-f]{2})")


def unescape(text: str) -> str:
    """The inverse of :func:`otel_bridge.strings.escaped` (proves it lossless)."""

    def one(m: re.Match[str]) -> str:
        if m.group(1):
            return chr(0xDC00 + int(m.group(1), 16))
        if m.group(2):
            return chr(int(m.group(2), 16))
        return "\\"

    return _ESCAPE.sub(one, text)


class _Sink:
    def consume(self, batch: Batch) -> None:
        del batch


def _all_strings(value: AnyValue) -> Iterator[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, tuple):
        for v in value:
            yield from _all_strings(v)
    elif isinstance(value, Mapping):
        for k, v in value.items():
            yield k
            yield from _all_strings(v)


_FACTORY = EventFactory(
    "fuzz", "fuzz-run", Emitter(_Sink(), Host().telemetry, batch_size=1, interval=1.0)
)


def check_os_strings(attrs: dict[str, AnyValue]) -> None:
    """A host record of ``attrs`` is valid text, written and read back intact, flag and all."""
    record = _FACTORY.record("file.create", 1, dict(attrs), attribution="syscall")
    for text in _all_strings(dict(record.attributes)):
        assert strings.is_valid(text), text
    flagged = record.attributes.get(strings.REPLACED_KEY)
    raw = record.attributes.get(strings.RAW_KEY)
    dirty = [
        k for k, v in attrs.items() if not strings.is_valid(k) or strings.clean({k: v}) != {k: v}
    ]
    assert (flagged is None) == (not dirty)
    if isinstance(raw, Mapping):
        for key, escaped_value in raw.items():
            original_key = unescape(key)
            assert original_key in attrs
            original = attrs[original_key]
            if isinstance(original, str):
                assert isinstance(escaped_value, str)
                assert unescape(escaped_value) == original
    [line] = encode_lines(Batch(logs=(record,)), ["logs"])
    line.encode("utf-8")
    [back] = decode_line(line).logs
    assert dict(back.attributes) == dict(record.attributes)


# --------------------------------------------------------------------------------------------
# Config loader
# --------------------------------------------------------------------------------------------

VALID_CONFIG = b"""receivers:
  otlp:
    protocols:
      grpc:
        endpoint: 127.0.0.1:4317
      http:
        endpoint: 127.0.0.1:4318
processors:
  batch:
    timeout: 200ms
exporters:
  file:
    path: ./out.jsonl
    flush_interval: 1s
service:
  telemetry:
    logs:
      level: info
  pipelines:
    traces:
      receivers: [otlp]
      processors: [batch]
      exporters: [file]
"""
_TOKENS = [
    b"&a ", b"*a", b"!!float ", b"!!set ", b"!!binary ", b"!!int ", b"!!str ", b"? ", b"[", b"]",
    b"{", b"}", b": ", b"\n  ", b"- ", b".nan", b".inf", b"-1", b"9" * 400, b"\x00", b"\xe9",
    b"\xff\xfe", b"${env:X}", b"$$", b"~", b"null", b"---\n", b"...", b"'", b'"', b"#", b"\t",
    b"<<: *a", b"0x", b"1e400", b"2001-01-01",
]  # fmt: skip


@st.composite
def mutated_config(draw: st.DrawFn) -> bytes:
    """VALID_CONFIG with a few splices: YAML-significant tokens or random bytes."""
    data = bytearray(VALID_CONFIG)
    for _ in range(draw(st.integers(1, 6))):
        pos = draw(st.integers(0, len(data)))
        cut = draw(st.integers(0, 8))
        piece = draw(st.one_of(st.sampled_from(_TOKENS), st.binary(max_size=6)))
        data[pos : pos + cut] = piece
    return bytes(data)


def check_config(data: bytes) -> None:
    """Loading ``data`` gives a config or a ConfigError (each problem a non-empty line)."""
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "config.yaml"
        path.write_bytes(data)
        problems: tuple[str, ...] = ()
        try:
            load_config(path, env={"X": "1"})
        except ConfigError as exc:
            problems = exc.problems or ("",)
        assert all(p.strip() for p in problems), problems


# --------------------------------------------------------------------------------------------
# OTLP bodies
# --------------------------------------------------------------------------------------------

_HEX = st.text("0123456789abcdef", min_size=0, max_size=34)
_json_leaf = st.one_of(
    st.none(), st.booleans(), st.integers(), st.floats(), st.text(_ANY_CHAR, max_size=8), _HEX
)
_json_any = st.recursive(
    _json_leaf,
    lambda inner: st.one_of(
        st.lists(inner, max_size=3),
        st.dictionaries(
            st.sampled_from(
                ["stringValue", "intValue", "arrayValue", "kvlistValue", "values", "key", "value"]
            ),
            inner,
            max_size=3,
        ),
    ),
    max_leaves=12,
)
_span_json = st.fixed_dictionaries(
    {"traceId": _HEX, "spanId": _HEX, "name": st.text(_ANY_CHAR, max_size=8)},
    optional={
        "parentSpanId": _HEX,
        "kind": _json_leaf,
        "startTimeUnixNano": st.one_of(st.integers(), st.text("0123456789", max_size=25)),
        "endTimeUnixNano": _json_leaf,
        "attributes": st.lists(st.fixed_dictionaries({"key": _json_leaf, "value": _json_any})),
        "status": _json_any,
        "events": _json_any,
        "links": _json_any,
    },
)
otlp_json_body = st.one_of(
    st.builds(
        lambda spans, res: json.dumps(
            {"resourceSpans": [{"resource": res, "scopeSpans": [{"spans": spans}]}]}
        ).encode("utf-8", "surrogatepass"),
        st.lists(_span_json, max_size=3),
        _json_any,
    ),
    st.binary(max_size=64),
)


def _valid_proto() -> bytes:
    span = Span(
        resource=Resource(attributes={"service.name": "fuzz"}),
        scope=Scope(name="fuzz"),
        trace_id=b"\x01" * 16,
        span_id=b"\x02" * 8,
        name="ok",
        start_time_unix_nano=1,
        end_time_unix_nano=2,
        attributes={"k": "v", "n": 1, "list": ("a", 2)},
    )
    return proto_codec.encode_traces([span]).SerializeToString()


VALID_PROTO = _valid_proto()


@st.composite
def otlp_proto_body(draw: st.DrawFn) -> bytes:
    """A valid serialized request with byte flips, cuts and insertions, or random bytes."""
    if draw(st.booleans()):
        return draw(st.binary(max_size=64))
    data = bytearray(VALID_PROTO)
    for _ in range(draw(st.integers(1, 4))):
        pos = draw(st.integers(0, len(data)))
        data[pos : pos + draw(st.integers(0, 3))] = draw(st.binary(max_size=3))
    return bytes(data)


def assert_writable(records: tuple[Span, ...] | tuple[LogRecord, ...]) -> None:
    """Every accepted record encodes as OTLP/JSON and UTF-8: nothing poisons a writer."""
    for record in records:
        if isinstance(record, Span):
            doc = json_codec.encode_traces((record,))
        else:
            doc = json_codec.encode_logs((record,))
        jsonl.dumps(doc).encode("utf-8")


def check_otlp_json(body: bytes) -> None:
    """Decoding an OTLP/JSON body gives records or a DecodeError; accepted ones are writable."""
    try:
        decoded = json_codec.decode_traces(body)
    except PermanentError:
        return
    assert_writable(decoded.records)


def check_otlp_proto(body: bytes) -> None:
    """Decoding a protobuf body gives records or a decode error; accepted ones are writable."""
    try:
        decoded = proto_codec.decode_traces(body)
    except (PermanentError, google.protobuf.message.DecodeError):
        return
    assert_writable(decoded.records)


# --------------------------------------------------------------------------------------------
# Real receivers
# --------------------------------------------------------------------------------------------


@dataclass
class Servers:
    """A running OTLP receiver (both protocols) and what it accepted."""

    receiver: OtlpReceiver
    sink: RecordingConsumer

    @property
    def http_url(self) -> str:
        """Base URL of the HTTP server."""
        return f"http://127.0.0.1:{self.receiver.http_port}"

    @property
    def grpc_target(self) -> str:
        """``host:port`` of the gRPC server."""
        return f"127.0.0.1:{self.receiver.grpc_port}"


@contextmanager
def running_receiver() -> Iterator[Servers]:
    """An OTLP receiver on free loopback ports, shut down afterwards."""
    config = OtlpReceiverConfig(
        protocols=Protocols(
            grpc=GrpcConfig(endpoint="127.0.0.1:0"), http=HttpConfig(endpoint="127.0.0.1:0")
        )
    )
    sink = RecordingConsumer()
    receiver = factory.create(CreateSettings(id="otlp"), config, sink)
    assert isinstance(receiver, OtlpReceiver)
    receiver.start(Host())
    try:
        yield Servers(receiver, sink)
    finally:
        receiver.shutdown()


def post(servers: Servers, body: bytes, content_type: str) -> int:
    """POST ``body`` to /v1/traces; the HTTP status."""
    request = urllib.request.Request(
        servers.http_url + "/v1/traces",
        data=body,
        headers={"Content-Type": content_type},
        method="POST",
    )
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            status: int = response.status
            return status
    except urllib.error.HTTPError as exc:
        return exc.code


def check_http(servers: Servers, body: bytes, content_type: str) -> None:
    """Any body gets a non-5xx answer; what the receiver accepted is writable."""
    before = len(servers.sink.spans)
    status = post(servers, body, content_type)
    assert status < 500, f"HTTP {status}"
    assert_writable(tuple(servers.sink.spans[before:]))


_SERVER_FAULTS = (grpc.StatusCode.INTERNAL, grpc.StatusCode.UNKNOWN)
_TRACES_METHOD = "/opentelemetry.proto.collector.trace.v1.TraceService/Export"


def grpc_caller(servers: Servers) -> tuple[grpc.Channel, Callable[[bytes], None]]:
    """A channel and a raw-bytes caller of TraceService/Export."""
    channel = grpc.insecure_channel(servers.grpc_target)
    export = channel.unary_unary(
        _TRACES_METHOD, request_serializer=lambda b: b, response_deserializer=lambda b: b
    )

    def call(body: bytes) -> None:
        failure = ""
        try:
            export(body, timeout=30)
        except grpc.RpcError as exc:
            if exc.code() in _SERVER_FAULTS:
                failure = f"gRPC {exc.code()}: {exc.details()}"
        assert not failure, failure

    return channel, call


TARGETS: dict[str, tuple[st.SearchStrategy[Any], Callable[[Any], None]]] = {
    "os_strings": (os_attributes, check_os_strings),
    "config": (mutated_config(), check_config),
    "otlp_json": (otlp_json_body, check_otlp_json),
    "otlp_proto": (otlp_proto_body(), check_otlp_proto),
}
"""The in-process targets by name: (strategy, check)."""
