"""Model calls joined to the connections of their process (issue 12, reproduction 5).

Spans recorded from the real instrumentors (``tests/testdata/semconv``) and OS records shaped as
the host receiver emits them go through the real normalizer and correlator. Each test sets the
connections the process was observed making around its chat calls.
"""

from __future__ import annotations

from collections.abc import Sequence

import msgspec
from semconv_corpus import load

from otel_bridge.grading import grade_evidence
from otel_bridge.model import (
    Attribution,
    Batch,
    Channel,
    Grade,
    LogRecord,
    Observation,
    RelationKind,
    Resource,
    Scope,
    Span,
    SpanKind,
)
from otel_bridge.processors.correlate import Config, Correlator
from otel_bridge.processors.normalize import Normalizer

HOST = "corpus-host"
PID = 4242
CREATED = "2026-01-01T00:00:00.000Z"
MS = 1_000_000
OS = Resource(
    attributes={
        "evidence.channel": Channel.OS.value,
        "evidence.backend": "strace",
        "host.id": HOST,
        "service.name": "otel-bridge-host",
    }
)


def _record(event: str, n: int, time: int, **attrs: object) -> LogRecord:
    base: dict[str, object] = {
        "evidence.record_id": f"strace:{n}",
        "evidence.attribution": "syscall",
        "evidence.causal": True,
        "process.pid": PID,
        "process.creation.time": CREATED,
    }
    base.update(attrs)
    return LogRecord(
        resource=OS,
        scope=Scope(name="otel_bridge.host"),
        time_unix_nano=time,
        event_name=event,
        attributes=base,  # type: ignore[arg-type]
    )


def _start(time: int) -> LogRecord:
    return _record(
        "process.start",
        0,
        time,
        **{
            "process.parent_pid": 1,
            "process.executable.path": "/usr/bin/python3",
            "process.command_args": ("python3", "agent.py"),
        },
    )


def _connect(
    n: int,
    time: int,
    port: int,
    *,
    address: str = "127.0.0.1",
    pid: int = PID,
    event: str = "network.connect",
) -> LogRecord:
    return _record(
        event,
        n,
        time,
        **{
            "process.pid": pid,
            "network.transport": "tcp",
            "network.peer.address": address,
            "network.peer.port": port,
        },
    )


def _correlate(
    spans: Sequence[Span], logs: Sequence[LogRecord]
) -> tuple[list[Observation], Correlator]:
    batch = Normalizer()(Batch(spans=tuple(spans), logs=tuple(logs)))
    core = Correlator(Config())
    core.add(batch.observations)
    return core.step(final=True), core


def _served(derived: list[Observation]) -> list[Observation]:
    return [o for o in derived if o.relation == RelationKind.SERVED_AT]


def _api_port(spans: Sequence[Span]) -> int:
    base = spans[0].attributes["gen_ai.openai.api_base"]
    assert isinstance(base, str)
    return int(base.split(":")[2].split("/")[0])


def test_stated_api_base_joins_every_call_exactly() -> None:
    """OpenLLMetry states the API base URL: every call joins the endpoint exactly, including the
    calls that reused the kept-alive connection, and the exporter's connection does not count."""
    spans = load("openllmetry.json")
    port = _api_port(spans)
    first = spans[0]
    logs = [
        _start(first.start_time_unix_nano - 500 * MS),
        _connect(1, first.start_time_unix_nano + MS, port),
        _connect(2, first.start_time_unix_nano + 2 * MS, 4318),  # the OTLP exporter
    ]
    derived, core = _correlate(spans, logs)
    served = _served(derived)
    assert len(served) == 3
    assert {o.object.id for o in served if o.object is not None} == {
        f"endpoint:tcp:127.0.0.1:{port}"
    }
    assert {o.subject.id for o in served} == {"model:openai:scripted-model"}
    for o in served:
        assert o.evidence.attribution == Attribution.EXACT_IDENTITY
        assert o.evidence.inferred is False
        assert o.evidence.causal is False
        assert len(o.evidence.support) == 2
    assert core.counts()["model_endpoint"] == 3


def test_root_chat_spans_get_their_process_as_caller() -> None:
    """No agent span: the process named by the resource pid is the caller of the model."""
    spans = load("openai_v2.json")
    derived, _ = _correlate(spans, [_start(spans[0].start_time_unix_nano - 500 * MS)])
    (requested,) = [o for o in derived if o.relation == RelationKind.REQUESTED]
    assert requested.subject.kind == "process"
    assert requested.subject.id.startswith(f"process:{HOST}:{PID}:")
    assert requested.object is not None
    assert requested.object.id == "model:openai:scripted-model"
    assert requested.evidence.attribution == Attribution.EXACT_IDENTITY


def test_unstated_endpoint_is_inferred_from_time_and_process() -> None:
    """openai-v2 states no endpoint: the one connection during the first call is an inferred,
    graded-D link; the later calls (kept-alive connection, nothing new observed) get none."""
    spans = load("openai_v2.json")
    first = spans[0]
    logs = [
        _start(first.start_time_unix_nano - 500 * MS),
        _connect(1, first.start_time_unix_nano + MS, 8000),
    ]
    derived, core = _correlate(spans, logs)
    (served,) = _served(derived)
    assert served.object is not None
    assert served.object.id == "endpoint:tcp:127.0.0.1:8000"
    assert served.evidence.inferred is True
    assert served.evidence.attribution == Attribution.HEURISTIC
    assert served.evidence.method == "model_endpoint:time_process"
    assert core.counts()["model_endpoint.inferred"] == 1
    assert core.counts()["model_endpoint.no_connection"] == 2


def test_two_compatible_endpoints_give_no_link() -> None:
    """Two endpoints during an unstated call: abstain, counted."""
    spans = load("openinference.json")[:1]
    t = spans[0].start_time_unix_nano
    logs = [_start(t - 500 * MS), _connect(1, t + MS, 8000), _connect(2, t + 2 * MS, 4318)]
    derived, core = _correlate(spans, logs)
    assert _served(derived) == []
    assert core.counts()["model_endpoint.several_endpoints"] == 1


def test_another_process_connection_is_not_joined() -> None:
    """A connection of another pid during the call is not the call's."""
    spans = load("openinference.json")[:1]
    t = spans[0].start_time_unix_nano
    derived, core = _correlate(spans, [_connect(1, t + MS, 8000, pid=PID + 1)])
    assert _served(derived) == []
    assert core.counts()["model_endpoint.no_connection"] == 1


def test_stated_endpoint_never_replaced_by_a_guess() -> None:
    """The span says port X; the process connected only to port Y: no link, even inferred."""
    spans = load("openllmetry.json")[:1]
    t = spans[0].start_time_unix_nano
    derived, core = _correlate(spans, [_connect(1, t + MS, _api_port(spans) + 1)])
    assert _served(derived) == []
    assert core.counts()["model_endpoint.endpoint_not_observed"] == 1


def test_host_name_is_not_compared_with_addresses() -> None:
    """``server.address`` naming a host: its resolution was not observed, so no link."""
    (span,) = load("openllmetry.json")[:1]
    attrs = dict(span.attributes)
    del attrs["gen_ai.openai.api_base"]
    attrs |= {"server.address": "api.openai.com", "server.port": 443}
    span = msgspec.structs.replace(span, attributes=attrs)
    t = span.start_time_unix_nano
    derived, core = _correlate([span], [_connect(1, t + MS, 443, address="203.0.113.7")])
    assert _served(derived) == []
    assert core.counts()["model_endpoint.unresolved_address"] == 1


def test_server_address_and_port_join_exactly() -> None:
    """GenAI ``server.address``/``server.port`` (an IP address) join like an API base URL."""
    (span,) = load("openllmetry.json")[:1]
    attrs = dict(span.attributes)
    del attrs["gen_ai.openai.api_base"]
    attrs |= {"server.address": "127.0.0.1", "server.port": 9000}
    span = msgspec.structs.replace(span, attributes=attrs)
    t = span.start_time_unix_nano
    logs = [_connect(1, t + MS, 9000), _connect(2, t + 2 * MS, 4318)]
    derived, _ = _correlate([span], logs)
    (served,) = _served(derived)
    assert served.evidence.identity_exact is True
    assert served.object is not None
    assert served.object.id == "endpoint:tcp:127.0.0.1:9000"


def test_an_attempted_connect_counts_and_says_so() -> None:
    """``strace`` sees a non-blocking ``connect`` as an attempt: it joins, and the link says so."""
    spans = load("openllmetry.json")[:1]
    t = spans[0].start_time_unix_nano
    logs = [_connect(1, t + MS, _api_port(spans), event="network.connect_attempt")]
    derived, _ = _correlate(spans, logs)
    (served,) = _served(derived)
    assert served.attrs["connection"] == "attempted_connect"


def test_inferred_link_grades_d_and_exact_link_c() -> None:
    """Time and process only: graded D (inferred); a stated endpoint: graded C (exact, non-causal).
    Spans: ``openai_v2.json`` (states no endpoint) and ``openllmetry.json`` (its API base)."""
    spans = load("openai_v2.json")[:1]
    t = spans[0].start_time_unix_nano
    (inferred,) = _served(_correlate(spans, [_connect(1, t + MS, 8000)])[0])
    assert grade_evidence(inferred.evidence) == Grade.D
    spans = load("openllmetry.json")[:1]
    t = spans[0].start_time_unix_nano
    (exact,) = _served(_correlate(spans, [_connect(1, t + MS, _api_port(spans))])[0])
    assert grade_evidence(exact.evidence) == Grade.C


def test_chat_span_under_a_workflow_gets_its_process_as_caller() -> None:
    """A recorded root chat span (``openai_v2.json``) placed under an application's
    ``invoke_workflow`` span: still no agent or tool call made the call, so the process is the
    caller, as for a root span (the typed workflow node stands where a plain span would)."""
    chat = load("openai_v2.json")[0]
    workflow = msgspec.structs.replace(
        chat,
        name="invoke_workflow triage",
        span_id=bytes.fromhex("00000000000000f1"),
        kind=SpanKind.INTERNAL,
        attributes={"gen_ai.operation.name": "invoke_workflow", "gen_ai.workflow.name": "triage"},
    )
    nested = msgspec.structs.replace(chat, parent_span_id=workflow.span_id)
    start = _start(chat.start_time_unix_nano - 500 * MS)
    derived, _ = _correlate([workflow, nested], [start])
    (requested,) = [o for o in derived if o.relation == RelationKind.REQUESTED]
    assert requested.subject.id.startswith(f"process:{HOST}:{PID}:")
    assert requested.object is not None
    assert requested.object.id == "model:openai:scripted-model"
