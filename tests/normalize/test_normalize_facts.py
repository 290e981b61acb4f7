"""Typed facts and stable keys on every entity the normalizer builds (``docs/model.md``)."""

from __future__ import annotations

from typing import Any

import pytest
from msgspec.structs import replace
from otel_span_helpers import HOST, model_span, os_record

from otel_bridge.identity import (
    agent_key,
    command_key,
    endpoint_key,
    executable_key,
    file_key,
    iso_to_ms,
    model_key,
    process_key,
    span_key,
    tool_call_key,
)
from otel_bridge.model import (
    AgentFacts,
    AnyValue,
    Batch,
    CommandFacts,
    EndpointFacts,
    Entity,
    EntityKind,
    ExecutableFacts,
    FileFacts,
    LogRecord,
    ModelFacts,
    Observation,
    ProcessFacts,
    RelationKind,
    Span,
    ToolCallFacts,
)
from otel_bridge.processors.normalize import Normalizer

START = "2026-01-01T00:00:00.000Z"
START_MS = iso_to_ms(START)
PARENT_START = "2025-12-31T23:59:59.500Z"


def _observations(*records: LogRecord) -> tuple[Observation, ...]:
    out = Normalizer()(Batch(logs=records))
    assert out.coverage == ()
    return out.observations


def _facts(entity: Entity | None) -> Any:
    assert entity is not None
    return entity.facts


# -- OS events ---------------------------------------------------------------------------------


def test_process_start_states_every_process_fact() -> None:
    """A full ``process.start`` record: every field typed, the key from executable and argv."""
    entity, executed, spawned = _observations(
        os_record(
            "process.start",
            "linux:1",
            process__parent_pid=1,
            process__parent__creation__time=PARENT_START,
            process__executable__path="/usr/bin/python3",
            process__executable__name="python3",
            process__command_args=["python3", "-c", "pass"],
            process__command_line="python3 -c pass",
            process__working_directory="/work",
            process__env__traceparent="00-" + "ab" * 16 + "-" + "cd" * 8 + "-01",
            process__owner="alice",
        )
    )
    argv = ("python3", "-c", "pass")
    assert entity.subject.facts == ProcessFacts(
        host_id=HOST,
        pid=42,
        start_time_ms=START_MS,
        parent_pid=1,
        parent_start_time_ms=iso_to_ms(PARENT_START),
        executable_path="/usr/bin/python3",
        executable_name="python3",
        argv=argv,
        command_line="python3 -c pass",
        cwd="/work",
        traceparent="00-" + "ab" * 16 + "-" + "cd" * 8 + "-01",
        exit_code=None,
        user="alice",
    )
    assert entity.subject.key == process_key("/usr/bin/python3", argv)
    assert executed.object is not None
    assert executed.object.facts == ExecutableFacts(path="/usr/bin/python3", name="python3")
    assert executed.object.key == executable_key("/usr/bin/python3")
    # The spawned child is the same process entity, full facts; the parent only its identity.
    assert spawned.object == entity.subject
    assert spawned.subject.facts == ProcessFacts(
        host_id=HOST, pid=1, start_time_ms=iso_to_ms(PARENT_START)
    )
    assert spawned.subject.key == ""  # nothing stable is known of it: no stable key
    assert process_key(None, None) is None


def test_partial_record_leaves_the_unstated_unknown() -> None:
    """A record without argv (or anything else) says None: not empty, not the parent's."""
    observations = _observations(
        os_record(
            "process.start",
            "linux:1",
            process__executable__path="/bin/sh",
            process__command_args=["sh", "-c", "ls"],
        ),
        os_record(
            "process.start",
            "linux:2",
            process__pid=43,
            process__parent_pid=42,
            process__parent__creation__time=START,
        ),
    )
    parent, _, child, spawned = observations
    assert spawned.subject.id == parent.subject.id
    assert _facts(parent.subject).argv == ("sh", "-c", "ls")
    facts = _facts(child.subject)
    assert facts == ProcessFacts(
        host_id=HOST, pid=43, start_time_ms=START_MS, parent_pid=42, parent_start_time_ms=START_MS
    )
    assert facts.argv is None
    assert facts.executable_path is None
    assert child.subject.key == ""


def test_observed_empty_argv_is_not_unknown() -> None:
    """An empty ``process.command_args`` array is an observed empty argv, ``()``."""
    (entity,) = _observations(os_record("process.exit", "l:1", process__command_args=[]))
    assert _facts(entity.subject).argv == ()
    assert entity.subject.key == ""  # an empty argv of an unknown image names nothing


def test_command_args_that_are_not_a_string_array_are_unknown() -> None:
    """argv is read from a string array only; a plain string is not an argument vector."""
    (entity,) = _observations(os_record("process.exit", "l:1", process__command_args="ls -l"))
    assert _facts(entity.subject).argv is None


def test_process_exit_states_its_code() -> None:
    """``process.exit``: the exit code, and nothing the record does not say."""
    (entity,) = _observations(os_record("process.exit", "l:1", process__exit__code=3))
    assert entity.subject.facts == ProcessFacts(
        host_id=HOST, pid=42, start_time_ms=START_MS, exit_code=3
    )


def test_process_exec_states_the_new_image() -> None:
    """``process.exec``: the process with its new executable, and the executable entity."""
    entity, executed = _observations(
        os_record(
            "process.exec",
            "l:1",
            process__executable__path="/usr/bin/../bin/ls",
            process__command_args=["ls", "/tmp"],
        )
    )
    assert _facts(entity.subject).executable_path == "/usr/bin/../bin/ls"
    assert _facts(entity.subject).argv == ("ls", "/tmp")
    assert executed.relation is RelationKind.EXECUTED
    assert executed.object is not None
    assert executed.object.facts == ExecutableFacts(path="/usr/bin/ls", name="ls")
    assert executed.object.key == "executable:/usr/bin/ls"


@pytest.mark.parametrize("event", ["file.open", "file.read", "file.write", "file.delete"])
def test_file_events_state_the_file(event: str) -> None:
    """File events: the process (identity only) and the file by normalised path."""
    (obs,) = _observations(os_record(event, "l:1", file__path="/tmp/tmpa1b2c3/./out.txt"))
    assert obs.subject.facts == ProcessFacts(host_id=HOST, pid=42, start_time_ms=START_MS)
    assert obs.object is not None
    assert obs.object.facts == FileFacts(path="/tmp/tmpa1b2c3/out.txt")
    assert obs.object.key == file_key("/tmp/tmpa1b2c3/out.txt") == "file:/tmp/<tmp>/out.txt"


def test_file_change_session_has_the_session_key() -> None:
    """A watcher's change: the run's session (key ``session``, no facts) and the file."""
    (obs,) = _observations(os_record("file.change", "w:1", file__path="/work/a.py"))
    assert obs.subject.kind is EntityKind.SESSION
    assert obs.subject.facts is None
    assert obs.subject.key == "session"
    assert obs.object is not None
    assert obs.object.facts == FileFacts(path="/work/a.py")


@pytest.mark.parametrize(
    ("event", "attrs", "facts"),
    [
        (
            "network.connect",
            {"network.peer.address": "10.0.0.1", "network.peer.port": 443},
            EndpointFacts(transport="tcp", address="10.0.0.1", port=443),
        ),
        (
            "network.listen",
            {"network.local.address": "0.0.0.0", "network.local.port": 8080},
            EndpointFacts(transport="tcp", address="0.0.0.0", port=8080),
        ),
        (
            "network.connect_attempt",
            {"network.transport": "UDP", "network.peer.address": "::1"},
            EndpointFacts(transport="udp", address="::1", port=0),
        ),
    ],
)
def test_network_events_state_the_endpoint(
    event: str, attrs: dict[str, AnyValue], facts: EndpointFacts
) -> None:
    """Network events: endpoint facts (port 0 when unstated) and the endpoint key."""
    record = os_record(event, "l:1")
    (obs,) = _observations(replace(record, attributes={**record.attributes, **attrs}))
    assert obs.object is not None
    assert obs.object.facts == facts
    assert obs.object.key == endpoint_key(facts.transport, facts.address, facts.port)


def _run(pid: int, tmp: str, script: str = "serve.py") -> Entity:
    (entity, _) = _observations(
        os_record(
            "process.exec",
            f"l:{pid}",
            process__pid=pid,
            process__creation__time=f"2026-01-0{pid % 9 + 1}T00:00:00.000Z",
            process__executable__path="/usr/bin/python3",
            process__command_args=["python3", f"{tmp}/{script}", "--port", str(8000 + pid)],
        )
    )
    return entity.subject


def test_process_keys_are_equal_across_runs_and_apart_across_commands() -> None:
    """Same command, other pid, start time, temporary directory and port: one key."""
    first, second = _run(101, "/tmp/tmpk3j4h5"), _run(202, "/tmp/tmpz9y8x7")
    assert first.id != second.id
    assert (
        first.key == second.key == "process:/usr/bin/python3:python# /tmp/<tmp>/serve.py --port #"
    )
    assert _run(303, "/tmp/tmpq1w2e3", "train.py").key != first.key


# -- spans -------------------------------------------------------------------------------------


def _spans(*spans: Span) -> tuple[Observation, ...]:
    return Normalizer()(Batch(spans=spans)).observations


def _nodes(observations: tuple[Observation, ...]) -> list[Entity]:
    return [o.subject for o in observations if o.relation is None]


AGENT = {"gen_ai.operation.name": "invoke_agent"}


@pytest.mark.parametrize(
    ("attrs", "span_name", "facts", "node_id"),
    [
        (
            {**AGENT, "gen_ai.agent.name": "planner", "gen_ai.agent.id": "a-1"},
            "invoke_agent planner",
            AgentFacts(service="svc", name="planner", agent_id="a-1"),
            "agent:svc:a-1",
        ),
        (
            {**AGENT, "gen_ai.agent.id": "a-1"},
            "invoke_agent",
            AgentFacts(service="svc", name=None, agent_id="a-1"),
            "agent:svc:a-1",
        ),
        (
            AGENT,
            "invoke_agent writer",
            AgentFacts(service="svc", name="writer"),
            "agent:svc:writer",
        ),
        (
            {"openinference.span.kind": "AGENT", "agent.name": "oi"},
            "Agent.run",
            AgentFacts(service="svc", name="oi"),
            "agent:svc:oi",
        ),
    ],
)
def test_agent_facts_and_key(
    attrs: dict[str, AnyValue], span_name: str, facts: AgentFacts, node_id: str
) -> None:
    """An agent states its service, name and id; its node is ``agent:<service>:<id or name>``,
    its key ``agent:<service>:<name or id>``."""
    (node,) = _nodes(_spans(model_span(span_name, 1, attrs=attrs)))
    assert node.id == node_id
    assert node.facts == facts
    assert node.key == agent_key("svc", facts.name, facts.agent_id)
    assert node.key
    assert node.label == (facts.name or facts.agent_id)


def test_agent_naming_nothing_is_its_span_alone() -> None:
    """No name, no id, no name in the span name: the agent is the span's, its facts say so."""
    (node,) = _nodes(_spans(model_span("invoke_agent", 1, attrs=AGENT)))
    assert node.id.startswith("agent:svc:span:")
    assert node.facts == AgentFacts(service="svc")
    assert node.key == ""  # the service alone does not say which agent: no stable key


def test_agents_with_one_name_and_two_ids_are_two_nodes() -> None:
    """An agent is identified by its id: two ids under one name are two nodes, one label."""
    nodes = _nodes(
        _spans(
            *(
                model_span(
                    "invoke_agent planner",
                    i,
                    attrs={**AGENT, "gen_ai.agent.name": "planner", "gen_ai.agent.id": f"a-{i}"},
                )
                for i in (1, 2)
            )
        )
    )
    assert [n.id for n in nodes] == ["agent:svc:a-1", "agent:svc:a-2"]
    assert [n.label for n in nodes] == ["planner", "planner"]
    assert [_facts(n).agent_id for n in nodes] == ["a-1", "a-2"]


TOOL = {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "shell"}


def test_tool_call_names_its_calling_agent() -> None:
    """The tool call's facts name the agent the span memory knows (through a plain span too)."""
    observations = _spans(
        model_span("invoke_agent", 1, attrs={**AGENT, "gen_ai.agent.name": "planner"}),
        model_span("execute_tool shell", 2, parent=1, attrs={**TOOL, "gen_ai.tool.call.id": "c1"}),
        model_span("step", 3, parent=1),
        model_span("execute_tool shell", 4, parent=3, attrs=TOOL),
    )
    tool, _, tool_via_step = (n for n in _nodes(observations) if n.kind != EntityKind.AGENT)
    assert tool.facts == ToolCallFacts(
        tool="shell",
        call_id="c1",
        agent="planner",
        trace_id=(1).to_bytes(16, "big").hex(),
        span_id=(2).to_bytes(8, "big").hex(),
    )
    assert tool.key == tool_call_key("planner", "shell") == "tool_call:planner:shell"
    assert _facts(tool_via_step).agent == "planner"
    assert tool_via_step.key == tool.key


def test_tool_call_of_an_agent_without_name_is_named_by_its_id() -> None:
    """An agent known only by id names its tool calls by that id."""
    observations = _spans(
        model_span("invoke_agent", 1, attrs={**AGENT, "gen_ai.agent.id": "a-7"}),
        model_span("execute_tool", 2, parent=1, attrs=TOOL),
    )
    assert _nodes(observations)[1].key == "tool_call:a-7:shell"


@pytest.mark.parametrize("parent", [None, 9], ids=["root", "parent-not-arrived"])
def test_tool_call_agent_is_unknown_when_not_known(parent: int | None) -> None:
    """A root tool call, or one whose ancestors have not arrived: agent None, not a guess."""
    (node,) = _nodes(_spans(model_span("execute_tool", 2, parent=parent, attrs=TOOL)))
    assert _facts(node).agent is None
    assert node.key == "tool_call:?:shell"


def test_declared_command_facts_and_key() -> None:
    """A declared command states its text and tool; runs in other temp dirs share its key."""

    def command(tmp: str, trace: int) -> Entity:
        args = f'{{"command": "pytest {tmp}/test_x.py -k 42"}}'
        attrs = {**TOOL, "gen_ai.tool.call.arguments": args}
        (declared,) = (
            o
            for o in _spans(model_span("execute_tool", 2, trace=trace, attrs=attrs))
            if o.relation is RelationKind.DECLARED_COMMAND
        )
        assert declared.object is not None
        return declared.object

    first, second = command("/tmp/tmpaaa111", 1), command("/tmp/tmpbbb222", 2)
    assert first.facts == CommandFacts(
        command="pytest /tmp/tmpaaa111/test_x.py -k 42", tool="shell"
    )
    assert first.key == command_key("shell", "pytest /tmp/tmpaaa111/test_x.py -k 42")
    assert first.id != second.id
    assert first.key == second.key == "command:shell:pytest /tmp/<tmp>/test_x.py -k #"


def test_model_facts_and_key() -> None:
    """A model states provider (lower case, ``unknown`` when unstated) and name."""
    nodes = _nodes(
        _spans(
            model_span(
                "chat",
                1,
                attrs={
                    "gen_ai.operation.name": "chat",
                    "gen_ai.provider.name": "OpenAI",
                    "gen_ai.request.model": "gpt-4o",
                },
            ),
            model_span("llm", 2, attrs={"openinference.span.kind": "LLM", "llm.model_name": "m"}),
        )
    )
    assert [n.facts for n in nodes] == [
        ModelFacts(provider="openai", name="gpt-4o"),
        ModelFacts(provider="unknown", name="m"),
    ]
    assert [n.key for n in nodes] == [model_key("openai", "gpt-4o"), "model:unknown:m"]


def test_plain_span_and_session_keys() -> None:
    """A plain span is keyed by service and name, a session by its kind; neither has facts."""
    observations = _spans(model_span("load config", 1, attrs={"session.id": "conv-9"}))
    (node,) = _nodes(observations)
    assert node.facts is None
    assert node.key == span_key("svc", "load config") == "span:svc:load config"
    (part_of,) = (o for o in observations if o.relation is RelationKind.PART_OF)
    assert part_of.object is not None
    assert part_of.object.facts is None
    assert part_of.object.key == "session"


def test_span_keys_are_equal_across_runs() -> None:
    """The same trace shape under other trace and span ids: equal keys, different ids."""

    def run(trace: int, base: int) -> list[Entity]:
        return _nodes(
            _spans(
                model_span(
                    "invoke_agent",
                    base,
                    trace=trace,
                    attrs={**AGENT, "gen_ai.agent.name": "planner"},
                ),
                model_span("execute_tool", base + 1, trace=trace, parent=base, attrs=TOOL),
                model_span("step", base + 2, trace=trace, parent=base),
            )
        )

    first, second = run(1, 10), run(2, 20)
    assert [n.key for n in first] == [n.key for n in second]
    assert [n.id for n in first[1:]] != [n.id for n in second[1:]]


def test_sources_name_their_span_and_os_event() -> None:
    """Every observation of a span states the span's ids on its source, and every observation of
    an OS event the event's name, so correlate and enrich read fields, not attribute strings."""
    span = model_span(
        "chat",
        0xAB,
        parent=0xCD,
        trace=0x1F,
        attrs={"gen_ai.operation.name": "chat", "gen_ai.request.model": "m"},
    )
    out = Normalizer()(Batch(spans=(span,), logs=(os_record("process.start", "linux:1"),)))
    by_backend = {o.source.backend: o.source for o in out.observations}
    sem, os_source = by_backend["otlp"], by_backend["linux"]
    assert (sem.trace_id, sem.span_id, sem.event) == (f"{0x1F:032x}", f"{0xAB:016x}", "")
    assert sem.span_id == sem.record_id
    assert (os_source.trace_id, os_source.span_id, os_source.event) == ("", "", "process.start")
