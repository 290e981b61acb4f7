"""Parsing OTLP protobuf requests with attributes kept as raw ``KeyValue`` bytes.

The protobuf runtime (upb) parses a request in C, but reading a repeated message field from
Python builds two wrapper objects per attribute (the ``KeyValue`` and its ``AnyValue``), each
registered in the runtime's object cache: about 5,500 machine instructions per attribute, more
than half of all decoding. A repeated embedded message and a repeated ``bytes`` field are the same
on the wire, so this module parses requests with *wire-compatible twins* of the OTLP messages
whose attribute fields are declared ``repeated bytes``: upb still parses the request and checks
every length in it, and each attribute arrives as the serialized bytes of its ``KeyValue``, to be
parsed here (or by the generated class, which raises ``DecodeError`` on a malformed one).

:func:`attributes_from_wire` turns those bytes into model values. The usual attribute (a key and a
string or integer value, each shorter than 128 bytes) is read straight from its bytes; identical
attributes repeat across spans (operation names, model and tool names), so a bounded table
remembers the values of short ones. Anything else (longer fields, other value types, fields in
another order, unknown fields) is handed to the generated ``KeyValue`` class, so the result never
depends on which path ran. The twins are built at import from the descriptors that
``opentelemetry-proto`` ships, in a private descriptor pool: field names, numbers and message
names are the originals, only the attribute fields' type differs, and in
:data:`ScanTraceRequest` also a span's status (bytes) and its rare fields (:func:`_rare_oneof`).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
from google.protobuf.descriptor import Descriptor, FileDescriptor
from google.protobuf.message import DecodeError
from opentelemetry.proto.collector.logs.v1 import logs_service_pb2
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2
from opentelemetry.proto.common.v1.common_pb2 import AnyValue as PbAnyValue
from opentelemetry.proto.common.v1.common_pb2 import KeyValue
from opentelemetry.proto.trace.v1.trace_pb2 import Status as PbStatus

from otel_bridge.model import AnyValue, Status, StatusCode

__all__ = [
    "STATUS_CODES",
    "LogsRequest",
    "ScanTraceRequest",
    "TraceRequest",
    "any_value_from_pb",
    "attributes_from_pb",
    "attributes_from_wire",
    "kv_from_message",
    "status_from_wire",
]

_KEY_VALUE = ".opentelemetry.proto.common.v1.KeyValue"
_KEEP = frozenset({"KeyValueList"})
"""Messages whose ``KeyValue`` fields stay messages: a ``kvlist_value`` inside an ``AnyValue`` is
read through the generated classes (see :func:`kv_from_message`)."""
_CACHE_LIMIT = 8192
"""Entries in the table of known attributes; a full table is emptied and starts again, so
attributes that never repeat (call and response ids) push the repeated ones out only now and
then. In the pipeline benchmark 520 distinct attributes make up four fifths of all, among 16,000
that occur once per pass; a table of 1,024 entries cost it a tenth more instructions per span."""
_CACHEABLE_BYTES = 200
"""Only attributes this short are remembered: with their decoded key and value, the table
holds at most about 6 MiB."""
_STATUS_LIMIT = 256
"""Distinct serialized statuses remembered (codes with their usual messages)."""
_SCALARS = frozenset({str, int, float, bool, bytes})
"""Value types that may be shared between spans (immutable); others are never remembered."""
_INT64_SIGN = 1 << 63
_UINT64_MASK = (1 << 64) - 1


def _twin_files(
    roots: Iterable[FileDescriptor], *, detect_rare: bool
) -> list[descriptor_pb2.FileDescriptorProto]:
    """Copies of ``roots`` and their dependencies, dependencies first, attributes as bytes.

    With ``detect_rare`` the span's rarely set fields are members of one oneof
    (:func:`_rare_oneof`).
    """
    ordered: list[FileDescriptor] = []
    seen: set[str] = set()

    def visit(file: FileDescriptor) -> None:
        if file.name in seen:
            return
        seen.add(file.name)
        for dependency in file.dependencies:
            visit(dependency)
        ordered.append(file)

    for root in roots:
        visit(root)
    protos = []
    for file in ordered:
        proto = descriptor_pb2.FileDescriptorProto()
        file.CopyToProto(proto)
        _retype(proto.message_type)
        if detect_rare and proto.package == "opentelemetry.proto.trace.v1":
            for message in proto.message_type:
                if message.name == "Span":
                    _rare_oneof(message)
        protos.append(proto)
    return protos


_F = descriptor_pb2.FieldDescriptorProto
_RARE_SPAN_FIELDS = {
    "trace_state": _F.TYPE_BYTES,
    "dropped_attributes_count": _F.TYPE_UINT32,
    "events": _F.TYPE_BYTES,
    "dropped_events_count": _F.TYPE_UINT32,
    "links": _F.TYPE_BYTES,
    "dropped_links_count": _F.TYPE_UINT32,
}
"""The span fields that are usually absent, with a type of the same wire type each. The status
is not among them: some instrumentations (OpenInference's) set it on every span, so it is read
directly, as bytes (:func:`status_from_wire`)."""


def _rare_oneof(span: descriptor_pb2.DescriptorProto) -> None:
    """Make the rare fields of ``span`` members of one ``oneof rare``: a detector, not a reader.

    ``WhichOneof("rare")`` then says in one call whether any of them is on the wire (the common
    answer is no). A oneof keeps only the last member it met, and repeated fields become single
    ones, so a span for which it says yes is read again from the full twin.
    """
    index = len(span.oneof_decl)
    span.oneof_decl.add(name="rare")
    for field in span.field:
        kind = _RARE_SPAN_FIELDS.get(field.name)
        if kind is not None:
            field.type = kind
            field.label = _F.LABEL_OPTIONAL
            field.ClearField("type_name")
            field.oneof_index = index
        elif field.name == "status":
            field.type = _F.TYPE_BYTES
            field.ClearField("type_name")


def _retype(messages: Iterable[descriptor_pb2.DescriptorProto]) -> None:
    for message in messages:
        _retype(message.nested_type)
        if message.name in _KEEP:
            continue
        for field in message.field:
            if field.type_name == _KEY_VALUE:
                field.type = descriptor_pb2.FieldDescriptorProto.TYPE_BYTES
                field.ClearField("type_name")


def _twin_pool(*, detect_rare: bool) -> descriptor_pool.DescriptorPool:
    """A private descriptor pool holding the twins of the OTLP trace and logs requests."""
    pool = descriptor_pool.DescriptorPool()
    roots = (trace_service_pb2.DESCRIPTOR, logs_service_pb2.DESCRIPTOR)
    for proto in _twin_files(roots, detect_rare=detect_rare):
        pool.Add(proto)
    return pool


def _twin(pool: descriptor_pool.DescriptorPool, name: str) -> Any:
    """The twin message class of the OTLP request ``name`` in ``pool``.

    The classes of the messages inside it are built here too, and held (:data:`_HELD`): upb
    builds a nested message's class when a request first reaches it and holds it only weakly,
    and a class is a reference cycle (its type dict, its method resolution order), so every
    young-generation collection freed the five classes a trace request reaches (about 25
    objects) and the next request built them again."""
    request = pool.FindMessageTypeByName(name)
    seen: dict[str, Descriptor] = {}
    todo = [request]
    while todo:
        message = todo.pop()
        if message.full_name not in seen:
            seen[message.full_name] = message
            todo.extend(f.message_type for f in message.fields if f.message_type is not None)
    _HELD.extend(message_factory.GetMessageClass(m) for m in seen.values())
    return message_factory.GetMessageClass(request)


_HELD: list[Any] = []
"""Every message class the twin requests reach, held for the life of the process (:func:`_twin`)."""


_TRACES = "opentelemetry.proto.collector.trace.v1.ExportTraceServiceRequest"
_PLAIN = _twin_pool(detect_rare=False)
TraceRequest = _twin(_PLAIN, _TRACES)
"""Twin of ``ExportTraceServiceRequest``: attributes as serialized ``KeyValue`` bytes."""
ScanTraceRequest = _twin(_twin_pool(detect_rare=True), _TRACES)
"""Twin of ``ExportTraceServiceRequest`` whose spans answer ``WhichOneof("rare")`` (None when
no rare field is set, see :func:`_rare_oneof`) and hold their status as serialized bytes; read a
span it flags from :data:`TraceRequest`."""
LogsRequest = _twin(_PLAIN, "opentelemetry.proto.collector.logs.v1.ExportLogsServiceRequest")
"""Twin of ``ExportLogsServiceRequest``: attributes as serialized ``KeyValue`` bytes."""

_values: dict[bytes, tuple[str, AnyValue]] = {}


_statuses: dict[bytes, Status] = {}
STATUS_CODES = {int(c): c for c in StatusCode}
"""Model status codes by their protobuf number."""


def status_from_wire(raw: bytes) -> Status | None:
    """The status of a serialized ``Status``, or None when its code is unknown.

    Parsed by the generated class (a message that is not valid UTF-8 raises ``DecodeError``);
    short ones are remembered, and the frozen result is shared.
    """
    known = _statuses.get(raw)
    if known is None:
        parsed = PbStatus.FromString(raw)
        code = STATUS_CODES.get(parsed.code)
        if code is None:
            return None
        known = Status(code=code, message=parsed.message)
        if len(raw) <= _CACHEABLE_BYTES:
            if len(_statuses) >= _STATUS_LIMIT:
                _statuses.clear()
            _statuses[raw] = known
    return known


def any_value_from_pb(value: PbAnyValue) -> AnyValue:
    """The model value of a protobuf ``AnyValue`` (an unset value is ``None``)."""
    kind = value.WhichOneof("value")
    if kind == "string_value":
        return value.string_value
    if kind == "int_value":
        return value.int_value
    if kind == "bool_value":
        return value.bool_value
    if kind == "double_value":
        return value.double_value
    if kind == "array_value":
        return tuple(any_value_from_pb(v) for v in value.array_value.values)
    if kind == "kvlist_value":
        return attributes_from_pb(value.kvlist_value.values)
    if kind == "bytes_value":
        return value.bytes_value
    return None


def attributes_from_pb(kvs: Iterable[KeyValue]) -> dict[str, AnyValue]:
    """Model attributes from ``KeyValue`` messages (a repeated key keeps its last value)."""
    out: dict[str, AnyValue] = {}
    for kv in kvs:
        value = kv.value
        # Most attributes are non-empty strings: read string_value directly (an unset oneof
        # reads as ""), and take the generic dispatch only for everything else.
        text = value.string_value
        out[kv.key] = text if text else any_value_from_pb(value)
    return out


def kv_from_message(kv: KeyValue) -> tuple[str, AnyValue]:
    """The key and model value of a generated ``KeyValue`` message (the general path)."""
    return kv.key, any_value_from_pb(kv.value)


def _read(raw: bytes) -> tuple[str, AnyValue]:
    """Key and value of one serialized ``KeyValue`` (see the module docstring)."""
    # The usual layout: 0x0A klen key 0x12 vlen <AnyValue>, every length below 128 (one byte),
    # the AnyValue a string (0x0A slen text) or an integer (0x18 varint) and nothing else.
    n = len(raw)
    if n > 3 and raw[0] == 0x0A and raw[1] < 0x80:
        i = 2 + raw[1]  # the AnyValue's tag
        if i + 3 < n and raw[i] == 0x12 and raw[i + 1] == n - i - 2 < 0x80:
            tag = raw[i + 2]
            if tag == 0x0A:  # string_value
                if raw[i + 3] == n - i - 4:
                    return raw[2:i].decode(), raw[i + 4 :].decode()
            elif tag == 0x18 and n - i - 3 <= 10:  # int_value: a varint ending the message
                value = 0
                shift = 0
                j = i + 3
                last = n - 1
                while j < last and raw[j] & 0x80:
                    value |= (raw[j] & 0x7F) << shift
                    shift += 7
                    j += 1
                if j == last and raw[j] < 0x80:
                    value = (value | raw[j] << shift) & _UINT64_MASK
                    if value >= _INT64_SIGN:
                        value -= 1 << 64
                    return raw[2:i].decode(), value
    return kv_from_message(KeyValue.FromString(raw))


def attributes_from_wire(raws: Sequence[bytes]) -> dict[str, AnyValue]:
    """Model attributes from serialized ``KeyValue``s (a repeated key keeps its last value).

    Raises ``DecodeError`` when a key or string is not valid UTF-8, as parsing the generated
    messages would.
    """
    out: dict[str, AnyValue] = {}
    values = _values
    try:
        # A slice is one list built in C; iterating the repeated field itself ends with an
        # IndexError raised (and its message formatted) inside the protobuf runtime.
        for raw in raws[:]:
            hit = values.get(raw)
            if hit is None:
                hit = _read(raw)
                if len(raw) <= _CACHEABLE_BYTES and hit[1].__class__ in _SCALARS:
                    if len(values) >= _CACHE_LIMIT:
                        values.clear()
                    values[raw] = hit
            out[hit[0]] = hit[1]
    except UnicodeDecodeError as exc:
        raise DecodeError(f"an attribute key or string value is not valid UTF-8: {exc}") from None
    return out
