"""Stable keys are made of what was observed, or there is none (``docs/model.md``, "Stable keys").

A key made only of placeholders (``process:?:?``, ``agent:<service>:?``) would be shared by every
unknown thing of its kind in every run, so comparing or joining runs by it would join unrelated
things. Each builder returns None for that case, and the normalizer gives such an entity the
empty key; a parent named by its pid alone is no entity at all.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
from otel_span_helpers import model_span, os_record

from otel_bridge.identity import (
    UNKNOWN_TOOL,
    agent_key,
    command_key,
    endpoint_key,
    executable_key,
    file_key,
    model_key,
    operation_key,
    path_shape,
    process_key,
    span_key,
    tool_call_key,
)
from otel_bridge.model import (
    Batch,
    EntityKind,
    LogRecord,
    Observation,
    ProcessFacts,
    RelationKind,
)
from otel_bridge.processors.normalize import Normalizer

NOTHING: list[tuple[str, Callable[[], str | None]]] = [
    ("process: no executable, no argv", lambda: process_key(None, None)),
    ("process: no executable, empty argv", lambda: process_key(None, ())),
    ("process: empty executable, no argv", lambda: process_key("", None)),
    ("executable: no path", lambda: executable_key("")),
    ("file: no path", lambda: file_key("")),
    ("endpoint: no address", lambda: endpoint_key("tcp", "", 443)),
    ("endpoint: unix socket without a path", lambda: endpoint_key("unix", "", 0)),
    ("agent: no name, no id", lambda: agent_key("svc", None, None)),
    ("agent: empty name", lambda: agent_key("svc", "", None)),
    ("tool call: no tool name", lambda: tool_call_key(None, UNKNOWN_TOOL)),
    ("tool call: no tool name, known agent", lambda: tool_call_key("planner", UNKNOWN_TOOL)),
    ("tool call: empty tool name", lambda: tool_call_key("planner", "")),
    ("model: no name", lambda: model_key("openai", "")),
    ("command: no words", lambda: command_key("shell", "  ")),
    ("span: no name", lambda: span_key("svc", "")),
    ("workflow: no name", lambda: operation_key("workflow", "svc", None)),
]


@pytest.mark.parametrize(("case", "build"), NOTHING, ids=[c for c, _ in NOTHING])
def test_a_key_of_nothing_is_none(case: str, build: Callable[[], str | None]) -> None:
    """Every builder says None, not a key of placeholders, when nothing stable is known."""
    assert build() is None, case


SOMETHING: list[tuple[str | None, str]] = [
    (process_key("/usr/bin/python3", None), "process:/usr/bin/python3:?"),
    (process_key(None, ("python3", "job.py")), "process:?:python# job.py"),
    (process_key("/bin/true", ()), "process:/bin/true:"),
    (executable_key("/usr/bin/cp"), "executable:/usr/bin/cp"),
    (file_key("/tmp/tmpab12/out.csv"), "file:/tmp/<tmp>/out.csv"),
    (endpoint_key("tcp", "10.0.0.5", 443), "endpoint:tcp:10.0.0.5:443"),
    (endpoint_key("unix", "/run/app.sock", 0), "endpoint:unix:/run/app.sock:0"),
    (agent_key("svc", None, "a-7"), "agent:svc:a-7"),
    (agent_key("svc", "planner", "a-7"), "agent:svc:planner"),
    (tool_call_key(None, "shell"), "tool_call:?:shell"),
    (model_key("", "m"), "model:unknown:m"),
    (command_key(UNKNOWN_TOOL, "ls -l"), "command:unknown_tool:ls -l"),
    (span_key("svc", "load"), "span:svc:load"),
    (operation_key("workflow", "svc", "travel"), "workflow:svc:travel"),
]


@pytest.mark.parametrize(("key", "expected"), SOMETHING, ids=[e for _, e in SOMETHING])
def test_a_key_of_something_observed_stays(key: str | None, expected: str) -> None:
    """One observed part is enough: the other may stay ``?`` (the calling agent, an argv)."""
    assert key == expected


def _normalized(*records: LogRecord) -> tuple[Observation, ...]:
    out = Normalizer()(Batch(logs=records))
    assert out.coverage == ()
    return out.observations


def test_entities_of_nothing_stable_have_the_empty_key() -> None:
    """A process seen only by its exit, a tool span naming no tool, an agent naming nothing and
    an unnamed workflow: each node has the empty key (graph.json ``""``), never ``...:?``."""
    (exit_,) = _normalized(os_record("process.exit", "l:1", process__exit__code=0))
    assert exit_.subject.kind is EntityKind.PROCESS
    assert exit_.subject.key == ""
    spans = Normalizer()(
        Batch(
            spans=(
                model_span("invoke_agent", 1, attrs={"gen_ai.operation.name": "invoke_agent"}),
                model_span("execute_tool", 2, attrs={"gen_ai.operation.name": "execute_tool"}),
                model_span(
                    "invoke_workflow", 3, attrs={"gen_ai.operation.name": "invoke_workflow"}
                ),
            )
        )
    ).observations
    nodes = {o.subject.kind: o.subject for o in spans if o.relation is None}
    assert nodes[EntityKind.TOOL_CALL].label == UNKNOWN_TOOL
    for kind in (EntityKind.AGENT, EntityKind.TOOL_CALL, EntityKind.WORKFLOW):
        assert nodes[kind].key == "", kind


def test_a_parent_named_by_its_pid_alone_is_no_node() -> None:
    """A ``process.start`` naming its parent's pid but not its start time (a parent the host
    receiver does not follow: the root's) makes no parent entity and no ``spawned``; the child
    keeps ``parent_pid``. With the parent's start time, the parent is a node, keyless."""
    alone = _normalized(os_record("process.start", "l:1", process__parent_pid=7))
    assert [o.relation for o in alone] == [None]
    facts = alone[0].subject.facts
    assert isinstance(facts, ProcessFacts)
    assert facts.parent_pid == 7
    assert facts.parent_start_time_ms is None
    known = _normalized(
        os_record(
            "process.start",
            "l:2",
            process__parent_pid=7,
            process__parent__creation__time="2025-12-31T23:59:59.000Z",
        )
    )
    (spawned,) = (o for o in known if o.relation is RelationKind.SPAWNED)
    parent = spawned.subject
    assert isinstance(parent.facts, ProcessFacts)
    assert parent.facts.start_time_ms is not None
    assert parent.key == ""


def test_a_temporary_path_inside_an_argument_is_masked_as_the_files_key_masks_it() -> None:
    """A new user compared keys of one run: the file ``/tmp/nu11/out.txt`` was keyed
    ``/tmp/<tmp>/out.txt`` but the ``sh -c 'echo hi > /tmp/nu11/out.txt'`` that wrote it
    ``/tmp/nu#/out.txt`` (the masking of temporary directories applied only where an argument
    started with the path): the same path now has one shape wherever it appears."""
    path = "/tmp/nu11/out.txt"
    file = file_key(path)
    assert file == "file:/tmp/<tmp>/out.txt"
    shell = process_key("/usr/bin/dash", ["sh", "-c", f"echo hi > {path}"])
    assert shell == "process:/usr/bin/dash:sh -c echo hi > /tmp/<tmp>/out.txt"
    assert process_key("/bin/cp", ["cp", f"--target={path}"]) == (
        "process:/bin/cp:cp --target=/tmp/<tmp>/out.txt"
    )
    assert command_key("run", f"cat {path}") == "command:run:cat /tmp/<tmp>/out.txt"
    assert path_shape("/home/me/tmp/x1") == "/home/me/tmp/x1"  # not a temporary directory
