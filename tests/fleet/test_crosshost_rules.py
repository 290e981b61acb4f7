"""The gateway's rules, fast: the cross-host join, evidence records and idempotent acceptance.

OS events are OTLP log records shaped as the host receiver writes them (``docs/contracts.md``),
normalized by the real ``normalize`` processor; agents and the gateway are real collectors built
from configurations (``evidence_to_logs`` on the agents, ``logs_to_evidence`` and ``crosshost`` on
the gateway), joined in process. ``test_fleet_crosshost.py`` does the same over real OTLP between
real processes on simulated hosts.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import msgspec
import pytest

from otel_bridge.component import CreateSettings, Host, Telemetry
from otel_bridge.config import parse_config
from otel_bridge.errors import DecodeError
from otel_bridge.exporters.graph import GraphExporter, GraphExporterConfig, JournalConfig
from otel_bridge.exporters.graph import factory as graph_exporter
from otel_bridge.identity import iso_ms
from otel_bridge.model import (
    Batch,
    Channel,
    CoverageRecord,
    Entity,
    EntityKind,
    LogRecord,
    Observation,
    RelationKind,
    Resource,
    Scope,
    Source,
    Span,
    SpanKind,
)
from otel_bridge.pipeline import Collector
from otel_bridge.processors import crosshost, normalize
from otel_bridge.processors.crosshost import LogsToEvidence, wire
from otel_bridge.processors.crosshost.join import CrossHostJoin
from otel_bridge.processors.crosshost.seen import SeenKeys, digest
from otel_bridge.testing import (
    ListReceiver,
    RecordingConsumer,
    connection_record,
    double_registry,
)

HOST_A = "host-a"
HOST_B = "host-b"
T0 = 1_800_000_000_000_000_000
START = iso_ms(1_800_000_000_000 - 5_000)
S = 1_000_000_000


def conn(
    event: str, host: str, pid: int, local: tuple[str, int], peer: tuple[str, int], *, t: int = T0
) -> LogRecord:
    """A ``network.connect`` or ``network.accept`` with both ends."""
    return connection_record(event, host, pid, (local, peer), t, start=START)


CLIENT = ("10.0.0.1", 40001)
SERVER = ("10.0.0.2", 8080)


def connect(
    host: str = HOST_A, pid: int = 100, local: tuple[str, int] = CLIENT, **kw: Any
) -> LogRecord:
    """Host A's client connects to the server."""
    return conn("network.connect", host, pid, local, kw.pop("peer", SERVER), **kw)


def accept(
    host: str = HOST_B, pid: int = 200, peer: tuple[str, int] = CLIENT, **kw: Any
) -> LogRecord:
    """Host B's server accepts from the client."""
    return conn("network.accept", host, pid, kw.pop("local", SERVER), peer, **kw)


def joins(*records: LogRecord, skew: float = 5.0) -> tuple[list[Observation], CrossHostJoin]:
    """The joins the records give, normalized then fed to the join in order."""
    batch = normalize.Normalizer()(Batch(logs=records))
    join = CrossHostJoin(int(skew * S))
    out: list[Observation] = []
    for obs in batch.observations:
        join.add_observation(obs, out)
    return out, join


def test_both_ends_with_the_same_4_tuple_join_exactly_with_their_support() -> None:
    (found,), join = joins(connect(), accept(t=T0 + S))
    assert found.relation is RelationKind.CONNECTED_TO_PROCESS
    assert found.subject.id.startswith(f"process:{HOST_A}:100:")
    assert found.object is not None
    assert found.object.id.startswith(f"process:{HOST_B}:200:")
    ev = found.evidence
    assert (ev.attribution, ev.identity_exact, ev.inferred, ev.causal) == (
        "exact_identity",
        True,
        False,
        False,
    )
    assert (ev.method, ev.grade) == ("tcp_4tuple", "C")
    assert len(ev.support) == 2
    assert found.attrs["source.host.id"] == HOST_A
    assert found.attrs["target.host.id"] == HOST_B
    assert join.counts.connections_joined == 1


def test_the_accept_may_arrive_first() -> None:
    found, _ = joins(accept(), connect())
    assert len(found) == 1


@pytest.mark.parametrize(
    ("name", "records"),
    [
        ("same server port, other client port", (connect(), accept(peer=("10.0.0.1", 40002)))),
        ("same ports, other client address", (connect(), accept(peer=("10.0.0.9", 40001)))),
        ("same client, other server address", (connect(), accept(local=("10.0.0.3", 8080)))),
        ("same client, other server port", (connect(), accept(local=("10.0.0.2", 8081)))),
        ("one host", (connect(host=HOST_B), accept())),
        (
            "loopback never leaves a host",
            (
                connect(local=("127.0.0.1", 40001), peer=("127.0.0.1", 8080)),
                accept(local=("127.0.0.1", 8080), peer=("127.0.0.1", 40001)),
            ),
        ),
        ("sightings too far apart", (connect(), accept(t=T0 + 6 * S))),
    ],
)
def test_no_join_unless_the_whole_4_tuple_matches_across_hosts_in_time(
    name: str, records: tuple[LogRecord, ...]
) -> None:
    found, _ = joins(*records)
    assert found == [], name


def test_two_processes_fitting_one_end_are_ambiguous_no_join() -> None:
    found, join = joins(accept(pid=200), accept(pid=201), connect())
    assert found == []
    assert join.counts.connections_ambiguous == 1


# -------------------------------------------------------------------------------- the fleet path


def _collector(processors: list[str], extra: dict[str, Any] | None = None) -> Collector:
    registry = double_registry(normalize.factory, *crosshost.factories)
    doc = {
        "receivers": {"list": None},
        "processors": {p: (extra or {}).get(p) for p in processors},
        "exporters": {"recording": None},
        "service": {
            "pipelines": {
                "evidence": {
                    "receivers": ["list"],
                    "processors": processors,
                    "exporters": ["recording"],
                }
            }
        },
    }
    return Collector(parse_config(doc, env={}, registry=registry))


@contextmanager
def running(
    processors: list[str], extra: dict[str, Any] | None = None
) -> Iterator[tuple[ListReceiver, RecordingConsumer, Collector]]:
    collector = _collector(processors, extra)
    collector.start()
    try:
        receiver = collector.component("list")
        recorder = collector.component("recording")
        assert isinstance(receiver, ListReceiver)
        assert isinstance(recorder, RecordingConsumer)
        yield receiver, recorder, collector
    finally:
        collector.shutdown()


def agent_ships(*batches: Batch) -> list[Batch]:
    """What an agent collector (normalize -> evidence_to_logs) hands its OTLP exporter (the
    real processors; this machine's host id)."""
    with running(["normalize", "evidence_to_logs"]) as (receiver, recorder, _):
        for batch in batches:
            receiver.emit(batch)
        return [Batch(spans=b.spans, logs=b.logs) for b in recorder.batches]  # what OTLP carries


def span(host_resource: str, trace: bytes, sid: int, parent: int, name: str) -> Span:
    return Span(
        resource=Resource(attributes={"service.name": host_resource}),
        scope=Scope(name="app"),
        trace_id=trace,
        span_id=sid.to_bytes(8, "big"),
        parent_span_id=parent.to_bytes(8, "big") if parent else b"",
        name=name,
        kind=SpanKind.SERVER if parent else SpanKind.CLIENT,
        start_time_unix_nano=T0,
        end_time_unix_nano=T0 + S,
    )


def shipped(host: str, batch: Batch) -> Batch:
    """What the agent on ``host`` ships for ``batch``: its records and its evidence records."""
    out = normalize.Normalizer()(batch)
    resource = wire.evidence_resource(host, f"instance-of-{host}")
    records = wire.encode(resource, out.observations, out.coverage, 2048)
    return Batch(spans=batch.spans, logs=batch.logs + tuple(records))


def test_gateway_accepts_agents_evidence_once_keeps_hosts_and_joins() -> None:
    trace = bytes(range(16))
    a = shipped(
        HOST_A, Batch(spans=(span("client", trace, 1, 0, "client.call"),), logs=(connect(),))
    )
    b = shipped(
        HOST_B, Batch(spans=(span("server", trace, 2, 1, "server.handle"),), logs=(accept(),))
    )
    with running(["logs_to_evidence", "crosshost"]) as (receiver, recorder, collector):
        receiver.emit(a)
        receiver.emit(b)
        first = list(recorder.observations)
        receiver.emit(a)  # an agent's queue resends after a crash
        receiver.emit(b)
        again = list(recorder.observations)
        telemetry = collector.host.telemetry
    assert again == first  # nothing added by the resend
    dropped = telemetry.value("duplicates_dropped", kind="processor", id="logs_to_evidence")
    shipped_records = [o for o in first if o.source.backend != "crosshost"]
    assert dropped == len(shipped_records) + 2 + 2  # and the two spans, the two raw OS records
    derived = {o.relation: o for o in first if o.source.backend == "crosshost"}
    assert set(derived) == {RelationKind.CONNECTED_TO_PROCESS, RelationKind.REMOTE_CHILD_OF}
    remote = derived[RelationKind.REMOTE_CHILD_OF]
    assert remote.subject.label == "server.handle"
    assert remote.object is not None
    assert remote.object.label == "client.call"
    assert (remote.evidence.method, remote.evidence.identity_exact) == ("w3c_trace_context", True)
    assert (remote.attrs["source.host.id"], remote.attrs["target.host.id"]) == (HOST_B, HOST_A)
    shipped_by = {o.attrs[wire.AGENT_HOST_ATTR] for o in first if o.source.backend != "crosshost"}
    assert shipped_by == {HOST_A, HOST_B}  # every record keeps its host


def test_a_trace_on_one_host_is_not_a_cross_host_join() -> None:
    trace = bytes(range(16))
    both = shipped(
        HOST_A,
        Batch(
            spans=(span("c", trace, 1, 0, "client.call"), span("s", trace, 2, 1, "server.handle"))
        ),
    )
    with running(["logs_to_evidence", "crosshost"]) as (receiver, recorder, _):
        receiver.emit(both)
        assert not [o for o in recorder.observations if o.source.backend == "crosshost"]


def test_two_hosts_counting_the_same_record_id_still_join_on_two_records() -> None:
    """CI saw it: both agents numbered their record ``strace:6``; the join's support named one
    id twice and the graph kept one. At the gateway each id is its agent instance's."""

    def numbered(record: LogRecord) -> LogRecord:
        return msgspec.structs.replace(
            record, attributes={**record.attributes, "evidence.record_id": "strace:6"}
        )

    a = shipped(HOST_A, Batch(logs=(numbered(connect()),)))
    b = shipped(HOST_B, Batch(logs=(numbered(accept(t=T0 + S)),)))
    with running(["logs_to_evidence", "crosshost"]) as (receiver, recorder, _):
        receiver.emit(a)
        receiver.emit(b)
        observations = list(recorder.observations)
    ends = {o.relation: o.id for o in observations if o.source.backend == "strace"}
    assert len(set(ends.values())) == 2, ends
    (join,) = [o for o in observations if o.source.backend == "crosshost"]
    assert sorted(join.evidence.support) == sorted(ends.values())


def test_os_record_ids_of_a_restarted_agent_are_new_evidence() -> None:
    """OS record ids count from 1 in every agent process: the same id from another agent
    instance is another event, and is kept."""
    first = agent_ships(Batch(logs=(connect(),)))
    restarted = agent_ships(Batch(logs=(connect(),)))  # a new agent instance, same record id
    with running(["logs_to_evidence"]) as (receiver, recorder, _):
        for batch in (*first, *restarted):
            receiver.emit(batch)
        observations = list(recorder.observations)
    assert len(observations) == 2
    # each keeps an id of its own (the agent's record id, scoped to the instance that shipped
    # it), so a graph or store keyed by id holds both and a derived relation names the right one
    first_id, second_id = (o.id for o in observations)
    assert first_id != second_id
    assert first_id.split("@")[0] == second_id.split("@")[0]
    assert len({o.occurrence for o in observations}) == 2  # two events, not one seen twice


def test_accepted_keys_survive_a_restart_and_a_torn_tail(tmp_path: Path) -> None:
    path = tmp_path / "state" / "accepted.keys"
    seen = SeenKeys(100, str(path))
    seen.open()
    keys = [digest("o", "h", "", str(i)) for i in range(10)]
    assert seen.reserve(keys) == [True] * 10
    seen.commit(keys)
    seen.close()
    with open(path, "ab") as f:
        f.write(b"\x01\x02\x03")  # a key torn by a kill -9
    again = SeenKeys(100, str(path))
    again.open()
    try:
        assert again.reserve([*keys, digest("o", "h", "", "new")]) == [False] * 10 + [True]
        assert path.stat().st_size == 80  # the torn key was cut off
        assert (path.stat().st_mode & 0o777, path.parent.stat().st_mode & 0o777) == (0o600, 0o700)
    finally:
        again.close()


def test_a_second_gateway_on_one_key_file_is_refused(tmp_path: Path) -> None:
    path = str(tmp_path / "accepted.keys")
    first = SeenKeys(10, path)
    first.open()
    try:
        from otel_bridge.errors import StartupError

        with pytest.raises(StartupError, match="held by another collector"):
            SeenKeys(10, path).open()
    finally:
        first.close()


def test_a_batch_the_pipeline_refused_is_not_remembered() -> None:
    seen = SeenKeys(10)
    key = digest("x")
    assert seen.reserve([key]) == [True]
    assert seen.reserve([key]) == [False]  # in flight
    seen.release([key])
    assert seen.reserve([key]) == [True]


def test_evidence_records_round_trip_every_value_exactly() -> None:
    """Bytes, nested arrays and maps, NaN, absent and explicit-false flags survive the wire."""
    (obs,) = normalize.Normalizer()(Batch(logs=(connect(),))).observations
    tricky = msgspec.structs.replace(
        obs,
        attrs={
            "bytes": b"\x00\xff",
            "nested": ("a", 1, ("x",), {"k": (1.5, None)}),
            "nan": float("nan"),
            "flag": False,
        },
        evidence=msgspec.structs.replace(obs.evidence, causal=False, inferred=None),
    )
    cov = CoverageRecord(source=obs.source, reason="r", time_unix_nano=T0, detail="d")
    records = wire.encode(wire.evidence_resource("h", "i"), [tricky, obs], [cov], max_records=2)
    assert len(records) == 2  # two observations, then the coverage record
    decoded_obs, decoded_cov = [], []
    for record in records:
        o, c = wire.decode(record)
        decoded_obs += o
        decoded_cov += c
    back = decoded_obs[0]
    assert math.isnan(back.attrs["nan"])  # type: ignore[arg-type]
    assert msgspec.structs.replace(
        back, attrs={**back.attrs, "nan": 0.0}
    ) == msgspec.structs.replace(tricky, attrs={**tricky.attrs, "nan": 0.0})
    assert decoded_obs[1] == obs
    assert decoded_cov == [cov]
    assert back.evidence.causal is False
    assert back.evidence.inferred is None


def test_an_evidence_record_that_does_not_decode_is_coverage_not_a_failure() -> None:
    (good,) = shipped(HOST_A, Batch(logs=(connect(),))).logs[1:]
    bad = msgspec.structs.replace(good, body=b"\xc1 not msgpack")
    with running(["logs_to_evidence"]) as (receiver, recorder, collector):
        receiver.emit(Batch(logs=(bad, good)))
        reasons = [c.reason for c in recorder.coverage]
        telemetry = collector.host.telemetry
    assert reasons == ["evidence_record_invalid"]
    assert len(recorder.observations) == 1
    assert telemetry.value("invalid_evidence_records", kind="processor", id="logs_to_evidence") == 1


@pytest.mark.parametrize("half", ["relation", "object"])
def test_an_observation_with_half_a_relation_from_another_host_does_not_decode(half: str) -> None:
    """What another host sends is checked where it is decoded (observations are not checked on
    construction): one with a relation and no object, or an object and no relation, is refused
    with the observation's place and what is wrong."""
    source = Source(channel=Channel.OS, backend="linux", record_id="linux:1")
    process = Entity(kind=EntityKind.PROCESS, id="process:h:1:1")
    broken = Observation(
        id="linux:1#0",
        time_unix_nano=T0,
        source=source,
        subject=process,
        relation=RelationKind.OPENED if half == "relation" else None,
        object=process if half == "object" else None,
    )
    whole = Observation(id="linux:2#0", time_unix_nano=T0, source=source, subject=process)
    (record,) = wire.encode(Resource(), [whole, broken], [], 10)
    with pytest.raises(DecodeError, match=r"observations\[1\]: an observation has both a relation"):
        wire.decode(record)


class _Killed(BaseException):
    """The gateway process dying (kill -9) at the point a test names."""


class _GraphThenDie:
    """The gateway's fan-out, ``[graph, file]``, killed after the graph exporter took the batch:
    before the file exporter, and before ``logs_to_evidence`` appends the batch's keys."""

    def __init__(self, graph: GraphExporter, *, die: bool) -> None:
        self.graph, self.die = graph, die

    def consume(self, batch: Batch) -> None:
        self.graph.consume(batch)
        if self.die:
            raise _Killed


def test_a_batch_resent_after_a_kill_between_journal_and_key_commit_counts_once(
    tmp_path: Path,
) -> None:
    """The mechanism of the restart test's rare failure (graph ``evidence_count`` 2 for spans
    in records.jsonl once), made certain: the gateway journals a batch in its graph and dies
    before its key file says the batch was accepted; the restarted gateway replays the journal,
    and the agent's queue resends the batch, which ``logs_to_evidence`` rightly takes again
    (it cannot know the exporters had it). The graph counts each observation once."""
    trace = bytes(range(16))
    batch = shipped(
        HOST_A,
        Batch(spans=(span("client", trace, 1, 0, "client.call"),), logs=(connect(),)),
    )
    state = tmp_path / "gateway"

    def gateway(*, die: bool) -> tuple[LogsToEvidence, GraphExporter, Telemetry]:
        config = GraphExporterConfig(
            output=str(state / "graph.json"),
            flush_interval=0,
            journal=JournalConfig(path=str(state / "graph.journal")),
        )
        graph = graph_exporter.create(CreateSettings(id="graph"), config, None)
        assert isinstance(graph, GraphExporter)
        telemetry = Telemetry()
        graph.start(Host(telemetry=telemetry))
        dedupe = crosshost.DedupeConfig(path=str(state / "accepted.keys"))
        accept_once = LogsToEvidence(
            crosshost.LogsToEvidenceConfig(dedupe=dedupe), _GraphThenDie(graph, die=die), telemetry
        )
        accept_once.start(Host(telemetry=telemetry))
        return accept_once, graph, telemetry

    first, graph, _ = gateway(die=True)
    with pytest.raises(_Killed):
        first.consume(batch)
    once = graph.snapshot()
    assert graph.journal is not None
    graph.journal.close()  # what the kill leaves: the batch journaled, its keys not written
    first.shutdown()
    assert (state / "accepted.keys").stat().st_size == 0

    second, graph, telemetry = gateway(die=False)
    try:
        second.consume(batch)  # the agent's persistent queue resends it
        assert telemetry.total("duplicates_dropped", kind="processor") == 0  # taken again
        after = graph.snapshot()
        (client,) = [n for n in after["nodes"] if n["kind"] == "span"]
        assert client["evidence_count"] == 1
        assert all(e["evidence_count"] == 1 for e in after["edges"])
        assert after == once
        redelivered = telemetry.total("redelivered", kind="exporter")
        assert redelivered == once["summary"]["observations"]
        second.consume(batch)  # and now its keys are known
        assert telemetry.total("duplicates_dropped", kind="processor") > 0
        assert graph.snapshot() == once
    finally:
        second.shutdown()
        graph.shutdown()
