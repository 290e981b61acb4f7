"""The compression of stored raw records: one block per batch (``ob_blocks``), or, in rows
stored before schema version 2, one ``record`` column per row.

**Blocks** (version byte 2). Every record of a stored batch (observations, spans, log records)
is msgpack as below; the batch's records are one msgpack array compressed once with zlib
(level 1): a row names its record by ``(block, pos)``. Records of one batch repeat each other's
names, paths and attribute values, so one block finds what per-record compression cannot: about
20 bytes per record against 330 compressed alone, and 3 µs of CPU against 40.

**Single records** (version byte 1, read only). A record is msgpack (an observation's
:mod:`otel_bridge.jsonl` form, or the OTLP/JSON request of one span or log record) compressed
with zlib and a preset dictionary of the field names and attribute keys such records repeat,
prefixed by one version byte. Records are a few hundred bytes each, too small for PostgreSQL's
own compression to find anything, and their bytes are mostly these names: the dictionary makes
them several times smaller. The dictionary of a version never changes (stored records depend on
it); a new one takes a new version byte.
"""

from __future__ import annotations

import zlib
from collections.abc import Sequence

import msgspec

_WORDS = (
    # observation (otel_bridge.jsonl)
    "id time_unix_nano end_time_unix_nano source channel backend record_id subject kind label "
    "attrs key facts type relation object evidence attribution causal inferred identity_exact "
    "method score support grade occurrence detail reason "
    "sem gw model os otlp linux strace ebpf psutil correlate syscall heuristic reported "
    "exact_identity sampled_process session_observation "
    "process executable file endpoint agent tool_call command span runtime_reads "
    "spawned executed opened wrote read created deleted renamed connected invoked called "
    "correlated_with_process "
    # typed facts
    "host_id pid start_time_ms parent_pid parent_start_time_ms executable_path executable_name "
    "argv command_line cwd traceparent exit_code user path name service agent_id tool call_id "
    "trace_id span_id provider transport address port "
    # OTLP/JSON
    "resourceLogs resourceSpans resource attributes scopeLogs scopeSpans scope version "
    "logRecords spans timeUnixNano observedTimeUnixNano severityNumber severityText body "
    "eventName traceId spanId parentSpanId startTimeUnixNano endTimeUnixNano status "
    "stringValue intValue boolValue doubleValue arrayValue kvlistValue values value "
    "droppedAttributesCount flags INFO "
    # attribute keys
    "evidence.record_id evidence.attribution evidence.causal evidence.channel evidence.backend "
    "host.id service.name otel_bridge.run.id otel-bridge-host otel_bridge.receivers.host "
    "process.pid process.creation.time process.parent_pid process.parent.creation.time "
    "process.executable.path process.executable.name process.command_args "
    "process.working_directory process.exit.code process.exit.time process.start process.exec "
    "process.exit file.path file.new_path file.open file.write file.read file.close "
    "network.peer.address network.peer.port network.transport server.address server.port "
    "gen_ai.operation.name gen_ai.agent.name gen_ai.agent.id gen_ai.tool.name "
    "gen_ai.tool.call.id gen_ai.tool.call.arguments gen_ai.request.model gen_ai.response.id "
    "gen_ai.provider.name gen_ai.usage.input_tokens gen_ai.usage.output_tokens "
    "invoke_agent execute_tool chat "
)
DICTIONARY = _WORDS.encode()
"""Version 1's preset dictionary (zlib uses its last 32 KiB; this is far shorter)."""
VERSION = b"\x01"


def pack(data: bytes) -> bytes:
    """``data`` compressed for a ``record`` column."""
    c = zlib.compressobj(6, zdict=DICTIONARY)
    return VERSION + c.compress(data) + c.flush()


def unpack(record: bytes) -> bytes:
    """The bytes :func:`pack` compressed; ValueError for an unknown version."""
    if record[:1] != VERSION:
        raise ValueError(f"unknown record encoding {record[:1]!r}")
    d = zlib.decompressobj(zdict=DICTIONARY)
    return d.decompress(record[1:]) + d.flush()


BLOCK_VERSION = b"\x02"
BLOCK_LEVEL = 1
"""zlib level of blocks: level 6 makes them about 13 % smaller for twice the CPU."""


def pack_block(records: Sequence[bytes]) -> bytes:
    """One batch's records (each msgpack) as one ``ob_blocks.data`` value."""
    return BLOCK_VERSION + zlib.compress(msgspec.msgpack.encode(list(records)), BLOCK_LEVEL)


def unpack_block(data: bytes) -> list[bytes]:
    """The records :func:`pack_block` packed, by position; ValueError for another version."""
    if data[:1] != BLOCK_VERSION:
        raise ValueError(f"unknown block encoding {data[:1]!r}")
    return msgspec.msgpack.decode(zlib.decompress(data[1:]), type=list[bytes])
