"""Stable keys and typed facts on graph nodes: the merge rules, their JSON, the schema's facts
definitions, and the ``--key`` filter."""

from __future__ import annotations

import json
import random
import socket
from pathlib import Path
from typing import Any, get_args

import msgspec
import pytest
from graph_helpers import PROC, file_entity, obs

from otel_bridge.cli import main
from otel_bridge.errors import DecodeError
from otel_bridge.graph import (
    Graph,
    GraphAccumulator,
    GraphFilter,
    dump,
    filter_graph,
    load,
    schema,
)
from otel_bridge.identity import (
    endpoint_id,
    endpoint_key,
    ephemeral_range,
    file_key,
    key_rank,
    process_key,
)
from otel_bridge.model import (
    AgentFacts,
    CommandFacts,
    EndpointFacts,
    Entity,
    EntityKind,
    ExecutableFacts,
    Facts,
    FileFacts,
    ModelFacts,
    Observation,
    ProcessFacts,
    ToolCallFacts,
)

START = ProcessFacts(
    host_id="h",
    pid=10,
    start_time_ms=1,
    parent_pid=1,
    executable_path="/usr/bin/python3",
    executable_name="python3",
    argv=("python3", "job.py"),
    cwd="/w",
)
FILE_EVENT = ProcessFacts(host_id="h", pid=10, start_time_ms=1)
EXIT = ProcessFacts(host_id="h", pid=10, start_time_ms=1, exit_code=2)
EXEC = ProcessFacts(
    host_id="h", pid=10, start_time_ms=1, executable_path="/bin/sh", argv=("sh", "-c", "x")
)


def _proc(facts: ProcessFacts | None, key: str = "") -> Entity:
    return Entity(kind=EntityKind.PROCESS, id=PROC.id, label=PROC.label, facts=facts, key=key)


def _node(observations: list[Observation], node_id: str = PROC.id) -> dict[str, Any]:
    acc = GraphAccumulator()
    acc.apply_many(observations)
    nodes: dict[str, dict[str, Any]] = {n["id"]: n for n in acc.to_dict()["nodes"]}
    return nodes[node_id]


def _json(facts: Facts) -> Any:
    return json.loads(msgspec.json.encode(facts))


def test_exit_code_and_argv_from_different_events_both_land() -> None:
    """start, a file event, exec and exit each state some fields; every field keeps its latest
    stated value, and a field no event states stays null (unknown)."""
    node = _node(
        [
            obs("s", subject=_proc(START), relation=None, time=100),
            obs("f", subject=_proc(FILE_EVENT), time=200, obj=file_entity("/x")),
            obs("e", subject=_proc(EXEC), relation=None, time=300),
            obs("x", subject=_proc(EXIT), relation=None, time=400),
        ]
    )
    facts = json.loads(json.dumps(node["facts"]))
    assert facts["type"] == "process"
    assert facts["argv"] == ["sh", "-c", "x"]  # the exec's, later than the start's
    assert facts["executable_path"] == "/bin/sh"
    assert facts["executable_name"] == "python3"  # stated by the start only
    assert (facts["exit_code"], facts["cwd"], facts["parent_pid"]) == (2, "/w", 1)
    assert (facts["user"], facts["traceparent"]) == (None, None)


def test_facts_merge_by_observation_time_not_arrival() -> None:
    """Late arrival does not win: the merge orders by observation time, then id."""
    events = [
        obs("s", subject=_proc(START), relation=None, time=100),
        obs("e", subject=_proc(EXEC), relation=None, time=300),
        obs("x", subject=_proc(EXIT), relation=None, time=400),
        obs("f", subject=_proc(FILE_EVENT), time=200, obj=file_entity("/x")),
    ]
    expected = _node(events)["facts"]
    for seed in range(10):
        shuffled = list(events)
        random.Random(seed).shuffle(shuffled)
        assert _node(shuffled)["facts"] == expected
    # equal times: the larger observation id is the later
    tie = [
        obs("b", subject=_proc(START), relation=None, time=5),
        obs("a", subject=_proc(EXEC), relation=None, time=5),
    ]
    assert _node(tie)["facts"]["argv"] == ("python3", "job.py")
    assert _node(tie[::-1])["facts"]["argv"] == ("python3", "job.py")


def test_a_repeated_record_moves_forward_in_time() -> None:
    """An equal record seen again later is the later one, even when an earlier sighting lost."""
    node = _node(
        [
            obs("s1", subject=_proc(START), relation=None, time=100),
            obs("s2", subject=_proc(START), relation=None, time=500),
            obs("e", subject=_proc(EXEC), relation=None, time=300),
        ]
    )
    assert node["facts"]["argv"] == ("python3", "job.py")


def test_nodes_without_facts_say_null_and_objects_merge_too() -> None:
    """A node no sighting gave facts has null facts; objects of relations merge like subjects."""
    plain = _node([obs("a", subject=PROC, relation=None)])
    assert (plain["facts"], plain["key"]) == (None, "")
    target = Entity(
        kind=EntityKind.FILE,
        id="file:/x",
        facts=FileFacts(path="/x"),
        key=file_key("/x") or "",
    )
    node = _node([obs("a", obj=target), obs("b", obj=file_entity("/x"))], "file:/x")
    assert node["facts"] == {"type": "file", "path": "/x"}
    assert node["key"] == "file:/x"


def _pkey(executable: str | None, argv: tuple[str, ...] | None) -> str:
    """A process key that exists (the builder returns None only for a key made of nothing)."""
    key = process_key(executable, argv)
    assert key is not None
    return key


def test_the_most_informative_key_wins_and_ties_keep_the_first() -> None:
    """Any key beats none; fewer ``?`` parts beat more; equal ranks keep the first seen."""
    full = _pkey("/usr/bin/python3", ("python3", "job.py"))
    partial = _pkey("/usr/bin/python3", None)
    assert process_key(None, None) is None  # a key made of nothing is no key
    assert key_rank("") < key_rank(partial) < key_rank(full)
    keys = ["", partial, full, partial, ""]
    stream = [obs(f"r{i}", subject=_proc(None, k), relation=None) for i, k in enumerate(keys)]
    assert _node(stream)["key"] == full
    assert _node(stream[::-1])["key"] == full
    other = _pkey("/bin/sh", ("sh",))
    first = [obs("a", subject=_proc(None, full), relation=None)]
    second = [obs("b", subject=_proc(None, other), relation=None)]
    assert _node(first + second)["key"] == full
    assert _node(second + first)["key"] == other


def test_facts_and_key_round_trip_and_carry_into_other_formats(tmp_path: Path) -> None:
    """graph.json keeps typed facts (tagged ``type``) and keys; PROV-JSON and GraphML carry them."""
    from otel_bridge.graph import to_prov, write_graphml

    key = _pkey("/usr/bin/python3", ("python3", "job.py"))
    acc = GraphAccumulator()
    acc.apply_many([obs("s", subject=_proc(START, key), relation=None)])
    path = tmp_path / "g.json"
    dump(acc.to_dict(), path)
    graph = Graph.from_dict(json.loads(path.read_text()))
    (node,) = graph.nodes
    assert node.facts == START
    assert node.key == key
    record = to_prov(graph)["activity"][f"ob:{PROC.id}"]
    assert record["ob:key"] == key
    assert json.loads(record["ob:facts"]) == _json(START)
    write_graphml(graph, tmp_path / "g.graphml")
    text = (tmp_path / "g.graphml").read_text()
    assert f">{key}<" in text


def test_schema_facts_definitions_match_the_model() -> None:
    """Every facts type has a schema branch requiring exactly its tag and fields."""
    branches = {
        b["properties"]["type"]["const"]: b
        for b in schema()["$defs"]["facts"]["oneOf"]
        if b.get("type") == "object"
    }
    types = get_args(Facts)
    assert set(branches) == {t.__struct_config__.tag for t in types}
    for cls in types:
        branch = branches[cls.__struct_config__.tag]
        # a type encoded with omit_defaults leaves its defaulted fields out (FileFacts.content)
        n = len(cls.__struct_fields__) - len(cls.__struct_defaults__)
        stated = cls.__struct_fields__[:n] if cls.__struct_config__.omit_defaults else None
        assert branch["required"] == ["type", *(stated or cls.__struct_fields__)]
        assert set(branch["properties"]) == {"type", *cls.__struct_fields__}


def test_key_filter_selects_nodes_by_exact_stable_key(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``GraphFilter(keys=...)`` and ``otel-bridge graph --key`` keep the nodes with that key."""
    key = _pkey("/usr/bin/python3", ("python3", "job.py"))
    acc = GraphAccumulator()
    acc.apply_many(
        [
            obs("s", subject=_proc(START, key), obj=file_entity("/x")),
            obs("t", subject=file_entity("/y"), obj=file_entity("/z")),
        ]
    )
    graph = acc.graph()
    view = filter_graph(graph, GraphFilter(keys=frozenset({key})))
    assert [n.id for n in view.nodes] == [PROC.id]
    assert [e.target for e in view.edges] == ["file:/x"]
    path = tmp_path / "g.json"
    dump(graph, path)
    assert main(["graph", str(path), "--key", key, "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert [n["key"] for n in doc["nodes"]] == [key]
    assert main(["graph", str(path), "--key", key[:-1], "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["nodes"] == []


EVERY_FACTS: list[Facts] = [
    START,
    ExecutableFacts(path="/usr/bin/python3", name="python3"),
    FileFacts(path="/x"),
    EndpointFacts(transport="tcp", address="127.0.0.1", port=11434),
    ModelFacts(provider="ollama", name="qwen2.5:0.5b"),
    AgentFacts(service="agents", name="planner"),
    ToolCallFacts(tool="shell", call_id="c1", agent=None, trace_id="t", span_id="s"),
    CommandFacts(command="python3 -c pass", tool="shell"),
]


def test_every_facts_type_passes_the_schema_and_loads_typed(tmp_path: Path) -> None:
    """One node per facts type: the written file validates and loads back the same records."""
    acc = GraphAccumulator()
    acc.apply_many(
        [
            obs(
                f"r{i}",
                subject=Entity(kind=EntityKind.SPAN, id=f"span:{i}", facts=facts, key=f"k:{i}"),
                relation=None,
            )
            for i, facts in enumerate(EVERY_FACTS)
        ]
    )
    path = tmp_path / "g.json"
    dump(acc.to_dict(), path)
    graph = load(path)
    assert [n.facts for n in graph.nodes] == EVERY_FACTS
    assert [n.key for n in graph.nodes] == [f"k:{i}" for i in range(len(EVERY_FACTS))]
    broken = json.loads(path.read_text())
    broken["nodes"][0]["facts"]["pid"] = "ten"
    with pytest.raises(DecodeError, match="nodes/0/facts"):
        Graph.from_dict(broken)


def test_a_loopback_port_the_kernel_chose_is_keyed_as_ephemeral() -> None:
    """A local server on port 0 gets a new port every run; its key must not carry the number,
    while a fixed port (11434), a remote address and the identity keep theirs."""
    low, high = ephemeral_range()
    chosen = socket.socket()
    chosen.bind(("127.0.0.1", 0))  # the kernel picks from the ephemeral range, as servers do
    port = chosen.getsockname()[1]
    chosen.close()
    assert low <= port <= high
    assert endpoint_key("tcp", "127.0.0.1", port) == "endpoint:tcp:127.0.0.1:ephemeral"
    assert endpoint_key("tcp", "::1", port) == "endpoint:tcp:::1:ephemeral"
    assert endpoint_key("tcp", "127.0.0.1", 11434) == "endpoint:tcp:127.0.0.1:11434"
    assert endpoint_key("tcp", "10.0.0.5", port) == f"endpoint:tcp:10.0.0.5:{port}"
    assert endpoint_id("tcp", "127.0.0.1", port) == f"endpoint:tcp:127.0.0.1:{port}"
