"""Connections a process already held when a backend attached to it (`network.observed_at=attach`).

``strace`` attaches to a running process (a standing collector following an agent from its
first span) after its OTLP connection exists: it reads the sockets the process holds from
``/proc`` and records each as found then (attribution ``sampled_process``, no causal claim, the
time of the read). What such a record states is that the process held that 4-tuple at that
moment: enough for ``transport_peer`` (one socket holds a 4-tuple), not a ``connect`` during a
model call (``model_endpoint:time_process`` reads a connection's time as when it was made).
A sender still without a process is said in words, once: a log warning and a status note.
"""

from __future__ import annotations

import logging
from pathlib import Path

import msgspec
import pytest
from correlate_builders import HOST, MS, T0, iso
from test_transport_peer import RECEIVER_PORT, SENDER_PORT, agent_span, method, peer

from otel_bridge.component import Host, Telemetry
from otel_bridge.identity import kind_id
from otel_bridge.model import (
    Batch,
    Channel,
    EmitterFacts,
    Entity,
    EntityKind,
    ModelFacts,
    Observation,
    RelationKind,
    Source,
)
from otel_bridge.processors.correlate import Config, CorrelateProcessor, Correlator
from otel_bridge.processors.normalize import Normalizer
from otel_bridge.testing import RecordingConsumer, connection_record


def held(pid: int, ends: tuple[tuple[str, int], tuple[str, int]], t: int) -> list[Observation]:
    """What normalize makes of a socket ``pid`` held when strace attached at ``t``, as the host
    receiver records it (``netscan.record_held_sockets``)."""
    record = connection_record("network.connect", HOST, pid, ends, t, start=iso(T0 // MS))
    attrs = {k: v for k, v in record.attributes.items() if k != "evidence.causal"}
    attrs["evidence.attribution"] = "sampled_process"
    attrs["network.observed_at"] = "attach"
    attrs["network.found_by"] = "procfs"
    out = Normalizer()(Batch(logs=(msgspec.structs.replace(record, attributes=attrs),)))
    assert out is not None
    return [o for o in out.observations if o.relation == RelationKind.CONNECTED_TO]


def test_a_connection_found_at_attach_links_its_sender() -> None:
    """Found 2 s after the agent's first span (the attach follows that span): linked, with the
    found connection as the link's support."""
    ends = (("127.0.0.1", SENDER_PORT), ("127.0.0.1", RECEIVER_PORT))
    conn = held(7, ends, T0 + 2000 * MS)
    assert conn[0].attrs["network.observed_at"] == "attach"
    assert conn[0].attrs["network.found_by"] == "procfs"
    core = Correlator(Config())
    core.add((agent_span(peer()), *conn))
    out = core.step() + core.step(final=True)
    [link] = method(out, "transport_peer")
    assert link.object is not None
    assert link.object.id == conn[0].subject.id
    assert conn[0].id in link.evidence.support
    assert not core.exact.unlinked


def model_call(pid: int, start: int, end: int) -> Observation:
    """A model call's ``#0`` observation whose resource names ``pid`` and no endpoint."""
    span = "c3" * 8
    return Observation(
        id=f"{span}#0",
        time_unix_nano=start,
        end_time_unix_nano=end,
        source=Source(
            channel=Channel.MODEL,
            backend="otlp",
            record_id=span,
            emitter=EmitterFacts(host_id=HOST, pid=pid, start_time_ms=T0 // MS),
            trace_id="ab" * 16,
            span_id=span,
        ),
        subject=Entity(
            kind=EntityKind.MODEL,
            id=kind_id(EntityKind.MODEL, "openai", "gpt-test"),
            label="gpt-test",
            facts=ModelFacts(provider="openai", name="gpt-test"),
        ),
        occurrence=f"{'ab' * 16}:{span}",
    )


@pytest.mark.parametrize("found_at_attach", [False, True])
def test_a_connection_found_at_attach_is_no_connect_during_a_model_call(
    found_at_attach: bool,
) -> None:
    """The same connection inside the call's interval: traced, it is the call's (inferred);
    found at an attach, its time says when it was seen, not when it was made: no link."""
    ends = (("127.0.0.1", 41000), ("127.0.0.1", 8080))
    t = T0 + 50 * MS
    if found_at_attach:
        conn = held(7, ends, t)
    else:
        record = connection_record("network.connect", HOST, 7, ends, t, start=iso(T0 // MS))
        normalized = Normalizer()(Batch(logs=(record,)))
        assert normalized is not None
        conn = [o for o in normalized.observations if o.relation == RelationKind.CONNECTED_TO]
    core = Correlator(Config())
    core.add((model_call(7, T0 + 10 * MS, T0 + 900 * MS), *conn))
    out = core.step(final=True)
    inferred = method(out, "model_endpoint:time_process")
    assert len(inferred) == (0 if found_at_attach else 1), out
    assert core.counts().get("model_endpoint.no_connection", 0) == (1 if found_at_attach else 0)


def test_an_unlinked_sender_is_said_once_on_the_log_and_in_the_status(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """No process held the connection: one warning naming the agent and the reason, however
    many of its spans arrive, and the same sentence in ``status().notes``."""
    sink = RecordingConsumer()
    processor = CorrelateProcessor(Config(), sink, Telemetry())
    with caplog.at_level(logging.WARNING, logger="otel_bridge.correlate"):
        processor.consume(Batch(observations=(agent_span(peer()),)))
        later = msgspec.structs.replace(agent_span(peer()), id="a2#0", occurrence="t:a2")
        processor.consume(Batch(observations=(later,)))
        processor.shutdown()
    said = [r.getMessage() for r in caplog.records if r.name == "otel_bridge.correlate"]
    assert len(said) == 1, said
    assert said[0].startswith("agent coder (service svc) could not be linked to its process")
    assert f"127.0.0.1:{SENDER_PORT} to port {RECEIVER_PORT}" in said[0]
    assert "process.pid" in said[0]
    assert processor.status().notes == (said[0],)


def test_under_observe_the_report_says_it_not_the_log(
    caplog: pytest.LogCaptureFixture, tmp_path: Path
) -> None:
    """``observe`` (its host has a run directory) says unlinked senders in its report: the
    processor keeps the note and logs nothing."""
    processor = CorrelateProcessor(Config(), RecordingConsumer(), Telemetry())
    processor.start(Host(run_dir=str(tmp_path)))
    with caplog.at_level(logging.WARNING, logger="otel_bridge.correlate"):
        processor.consume(Batch(observations=(agent_span(peer()),)))
        processor.shutdown()
    assert not [r for r in caplog.records if r.name == "otel_bridge.correlate"]
    assert len(processor.status().notes) == 1
