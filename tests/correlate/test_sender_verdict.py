"""When a standing collector says ``no_connection`` for a sender whose spans named no pid.

A claim (spans naming no pid, sent from a loopback peer) with no process seen holding its
connection is said ``no_connection`` once ``sender_grace`` has passed since its first request
arrived and the host receiver has had nothing left to follow for a second
(``ProcessInterests.settled_since``), not only at shutdown or after ``retention``. The claim
stays open: a holder recorded later is still linked and the sentence corrected. A UDP socket
with the sender's ends never links a sender (OTLP comes over TCP). The end-to-end case (a
standing collector as ``nobody``, a real SDK agent) is
``tests/standing/test_standing_sender_verdict.py``.
"""

from __future__ import annotations

import logging
import time

import msgspec
import pytest
from correlate_builders import HOST, MS, T0, iso
from test_found_at_attach import held
from test_transport_peer import RECEIVER_PORT, SENDER_PORT, agent_span, method, peer
from waiting import wait_until

from otel_bridge.component import Host, ProcessInterest, ProcessInterests, Telemetry
from otel_bridge.model import (
    SENDER_CORRECTED_ATTR,
    SENDER_SKIP_ATTR,
    Batch,
    Observation,
    RelationKind,
)
from otel_bridge.processors.correlate import Config, CorrelateProcessor, Correlator
from otel_bridge.processors.correlate.shared import DEFAULT_ALLOWED_LATENESS_S
from otel_bridge.processors.normalize import Normalizer
from otel_bridge.testing import RecordingConsumer, connection_record

S = 1_000_000_000
ENDS = (("127.0.0.1", SENDER_PORT), ("127.0.0.1", RECEIVER_PORT))


def _sightings(sink: RecordingConsumer, attr: str) -> list[Observation]:
    return [o for o in sink.observations if attr in o.subject.attrs]


def _said(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "otel_bridge.correlate"]


def test_overdue_says_it_only_after_the_grace_and_without_a_holder() -> None:
    core = Correlator(Config())
    core.add((agent_span(peer()),))
    core.step()
    now = time.monotonic_ns()
    core.exact.overdue(now, 60 * S)  # the grace has not passed
    assert not core.exact.unlinked
    core.exact.overdue(now + 61 * S, 60 * S)
    [sentence] = core.exact.unlinked
    assert "could not be linked" in sentence
    assert "no followed process" in sentence
    [sighting] = core.exact.unsent()
    assert sighting.subject.attrs[SENDER_SKIP_ATTR] == "no_connection"
    # said once, and not again at the end
    core.exact.overdue(now + 120 * S, 60 * S)
    core.step(final=True)
    assert core.exact.unlinked == [sentence]
    assert core.counts()["exact.transport_peer.no_connection"] == 1


def test_a_claim_with_its_holder_is_not_said_overdue() -> None:
    core = Correlator(Config())
    core.add((agent_span(peer()), *held(7, ENDS, T0 + 2000 * MS)))
    core.exact.overdue(time.monotonic_ns() + 3600 * S, S)
    assert not core.exact.unlinked
    assert method(core.step(final=True), "transport_peer")


def test_a_udp_socket_with_the_senders_ends_links_no_sender() -> None:
    """A process holding a *UDP* socket whose ends are the TCP peer's numbers (the two port
    spaces are separate): not the sender."""
    record = connection_record("network.connect", HOST, 9, ENDS, T0 + 2 * MS, start=iso(T0 // MS))
    attrs = {**record.attributes, "network.transport": "udp", "network.observed_at": "attach"}
    out = Normalizer()(Batch(logs=(msgspec.structs.replace(record, attributes=attrs),)))
    assert out is not None
    udp = [o for o in out.observations if o.relation == RelationKind.CONNECTED_TO]
    assert udp
    assert udp[0].object is not None
    assert udp[0].object.id.startswith("endpoint:udp:")
    core = Correlator(Config())
    core.add((agent_span(peer()), *udp))
    out_all = core.step() + core.step(final=True)
    assert not method(out_all, "transport_peer"), out_all
    assert core.counts()["exact.transport_peer.no_connection"] == 1


_YEARS = 10 * 365 * 86400.0


def _standing(
    grace: float, host: Host, lateness: float = DEFAULT_ALLOWED_LATENESS_S
) -> tuple[CorrelateProcessor, RecordingConsumer]:
    sink = RecordingConsumer()
    config = Config(sender_grace=grace, allowed_lateness=lateness)
    processor = CorrelateProcessor(config, sink, Telemetry())
    processor.start(host)  # no run directory: a standing collector
    return processor, sink


def test_a_standing_collector_says_it_within_the_grace(caplog: pytest.LogCaptureFixture) -> None:
    """No batch arrives after the agent's: the processor's own clock says it, on the log and as
    a sighting sent on, while it still runs."""
    processor, sink = _standing(0.2, Host())
    with caplog.at_level(logging.WARNING, logger="otel_bridge.correlate"):
        started = time.monotonic()
        processor.consume(Batch(observations=(agent_span(peer()),)))
        wait_until(lambda: _said(caplog), 10, "the no_connection sentence")
        took = time.monotonic() - started
        processor.shutdown()
    # the grace, the second the host plane must have been settled for, a tick of slack
    assert 0.2 <= took < 0.2 + 1.0 + 1.5, took
    [sentence] = _said(caplog)
    assert "could not be linked" in sentence, sentence
    assert [o.subject.attrs[SENDER_SKIP_ATTR] for o in _sightings(sink, SENDER_SKIP_ATTR)] == [
        "no_connection"
    ]
    assert processor.status().notes == (sentence,)


class _Asked(ProcessInterests):
    """Process interests that note when the correlator's verdict thread asked if they settled."""

    def __init__(self) -> None:
        super().__init__()
        self.asked: list[int] = []

    def settled_since(self) -> int | None:
        self.asked.append(time.monotonic_ns())
        return super().settled_since()


def test_a_follow_in_progress_holds_the_verdict_back(caplog: pytest.LogCaptureFixture) -> None:
    """While the host receiver has not settled an interest (a ``strace`` attach in progress),
    nothing is said, however long the grace has passed; a second after it settles it is."""
    interests = _Asked()
    interests.subscribe(lambda _: None, settles=True)
    interests.publish(ProcessInterest(pid=0, service="svc", peer=("127.0.0.1", SENDER_PORT, 4317)))
    assert interests.settled_since() is None
    # the observations are timed in 2023 (T0): a lateness longer than that keeps the idle
    # clock (``test_idle_watermark.py``) from moving the watermark years on while this test
    # waits, which would evict the claim; what is tested here is the sender verdict alone
    processor, _ = _standing(0.05, Host(interests=interests), _YEARS)
    with caplog.at_level(logging.WARNING, logger="otel_bridge.correlate"):
        processor.consume(Batch(observations=(agent_span(peer()),)))
        past = time.monotonic_ns() + 1_200_000_000  # the grace and the settled second
        # two of the verdict thread's checks after that (the first one's sentence, had it
        # said one, is on the log before the second check begins)
        wait_until(lambda: len([t for t in interests.asked if t >= past]) >= 2, 30, "2 checks")
        assert not _said(caplog)
        settled = time.monotonic()
        interests.settle()
        wait_until(lambda: _said(caplog), 10, "the sentence once settled")
        assert time.monotonic() - settled >= 1.0
        processor.shutdown()


def test_a_holder_recorded_after_the_verdict_is_linked_and_the_sentence_corrected(
    caplog: pytest.LogCaptureFixture,
) -> None:
    processor, sink = _standing(0.05, Host())
    with caplog.at_level(logging.WARNING, logger="otel_bridge.correlate"):
        processor.consume(Batch(observations=(agent_span(peer()),)))
        wait_until(lambda: _said(caplog), 10, "the no_connection sentence")
        # the holder's connection, found late (a slow attach): linked once the watermark passes
        processor.consume(Batch(observations=tuple(held(7, ENDS, T0 + 3000 * MS))))
        wait_until(lambda: len(_said(caplog)) == 2, 10, "the correction")
        processor.shutdown()
    first, correction = _said(caplog)
    assert "could not be linked" in first
    assert correction.startswith("correction: agent coder (service svc) was said not to be")
    assert "pid 7 held the connection its spans came over" in correction, correction
    links = [o for o in sink.observations if o.evidence.method == "transport_peer" and o.relation]
    assert len(links) == 1, links
    assert _sightings(sink, SENDER_CORRECTED_ATTR)
    assert processor.status().notes == (correction,)
    assert processor.outcomes["exact.transport_peer.corrected"] == 1


def test_observe_decides_at_its_end_not_by_the_clock(tmp_path: object) -> None:
    """Under ``observe`` (a run directory) no early verdict: decided once, at the end."""
    sink = RecordingConsumer()
    processor = CorrelateProcessor(Config(sender_grace=0.01), sink, Telemetry())
    processor.start(Host(run_dir=str(tmp_path)))
    processor.consume(Batch(observations=(agent_span(peer()),)))
    processor.consume(Batch(observations=()))
    assert not processor.status().notes
    processor.shutdown()
    assert len(processor.status().notes) == 1


def test_sender_grace_must_be_positive() -> None:
    assert Config(sender_grace=0).validate() == ["sender_grace: must be positive"]
