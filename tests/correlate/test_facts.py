"""correlate and enrich read typed facts: nothing is parsed back out of attribute strings.

An entity without facts is skipped and counted, never linked; derived process entities carry
the facts (and stable key) of the observation they rest on; the identity helpers have one home.
"""

from __future__ import annotations

import ast
from pathlib import Path

import msgspec
import pytest
from correlate_builders import HOST, MS, T0, Proc, declaration, exit_obs, traceparent
from test_enrich import make

from otel_bridge.component import PROCESSOR, CreateSettings, Host, Telemetry
from otel_bridge.identity import iso_ms
from otel_bridge.model import (
    AnyValue,
    Attribution,
    Batch,
    Entity,
    Observation,
    ProcessFacts,
    RelationKind,
)
from otel_bridge.processors.correlate import Config, Correlator, factory
from otel_bridge.processors.enrich import (
    HOLD_MARGIN_S,
    EnrichProcessor,
    process_attributes,
    process_span_id,
)
from otel_bridge.processors.enrich import Config as EnrichConfig
from otel_bridge.testing import RecordingConsumer

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "otel_bridge"


def run(obs: list[Observation]) -> tuple[list[Observation], dict[str, int]]:
    """All derived observations of ``obs`` and the outcome counts."""
    core = Correlator(Config())
    core.add(tuple(obs))
    return core.step() + core.step(final=True), dict(core.counts())


def without_facts(obs: Observation) -> Observation:
    """``obs`` with the facts removed from its entities (attributes left as they were)."""

    def strip(ent: Entity | None) -> Entity | None:
        return None if ent is None else msgspec.structs.replace(ent, facts=None)

    subject = strip(obs.subject)
    assert subject is not None
    return msgspec.structs.replace(obs, subject=subject, object=strip(obs.object))


KNOWN_PARENT: dict[str, AnyValue] = {"process.parent.creation.time": iso_ms(T0 // 1_000_000 - 1000)}
"""A start record naming its parent's start time: its normalizer observations include
``spawned`` (a parent named by its pid alone is no node)."""


def links(out: list[Observation]) -> list[Observation]:
    """The derived process links among ``out``."""
    return [o for o in out if o.relation == RelationKind.CORRELATED_WITH_PROCESS]


# ------------------------------------------------------------------ no facts: skip and count


def test_process_without_facts_is_counted_and_never_linked() -> None:
    """A start record whose entities carry no ProcessFacts gives no link of any kind, although
    its attributes name the declared command and the tool span's traceparent; each of its
    observations (entity, executed, spawned) and its exit are counted as skipped."""
    span = "a1" * 8
    p = Proc(pid=3, exe="/usr/bin/git", argv=("git", "status"), time=T0 + MS, extra=KNOWN_PARENT)
    p.traceparent = traceparent(span)
    stripped = [without_facts(o) for o in [*p.observations(), exit_obs(p, T0 + 2 * MS)]]
    assert stripped[0].attrs["process.command_args"] == ("git", "status")  # still stated
    out, counts = run(declaration(span, "git status", T0) + stripped)
    assert links(out) == []
    assert counts["skipped.no_facts"] == 4
    assert counts["skip.no_candidate"] == 1
    # The same record with its facts is linked exactly.
    out, counts = run(declaration(span, "git status", T0) + p.observations())
    assert [o.evidence.method for o in links(out)] == ["traceparent"]
    assert "skipped.no_facts" not in counts


def test_declaration_without_facts_is_counted_and_never_bridged() -> None:
    """A declared_command whose command entity has no CommandFacts declares nothing."""
    p = Proc(pid=5, exe="/usr/bin/make", argv=("make", "all"), time=T0 + MS)
    invoked, declared = declaration("b2" * 8, "make all", T0)
    assert declared.object is not None
    bare = msgspec.structs.replace(
        declared, object=msgspec.structs.replace(declared.object, facts=None)
    )
    out, counts = run([invoked, bare, *p.observations()])
    assert links(out) == []
    assert counts["skipped.no_facts"] == 1
    out, counts = run([invoked, declared, *p.observations()])
    assert [o.evidence.method for o in links(out)] == ["singleton:basename+tail"]


def test_skipped_no_facts_reaches_the_run_summary() -> None:
    """The processor publishes the skip as ``correlate.skipped.no_facts`` and in outcomes."""
    sink = RecordingConsumer()
    proc = factory.create(CreateSettings(id="correlate"), Config(), sink)
    host = Host()
    proc.start(host)
    p = Proc(pid=6, exe="/usr/bin/ls", argv=("ls",), time=T0)
    proc.consume(Batch(observations=(without_facts(p.observations()[0]),)))  # type: ignore[attr-defined]
    proc.shutdown()
    assert (
        host.telemetry.by_label("outcome", kind=PROCESSOR, type="correlate")["skipped.no_facts"]
        == 1
    )
    assert proc.outcomes["skipped.no_facts"] == 1  # type: ignore[attr-defined]


# ------------------------------------------------------------------ derived entities


def test_bridge_process_entity_carries_identity_facts_only() -> None:
    """The process a singleton bridge points at carries the facts that never change over the
    process's life (host, pid, start) and no image, argv, key or label: the bridge is stamped
    later than the start it rests on, so a copied image would outrank a later exec."""
    p = Proc(pid=7, exe="/usr/bin/pytest", argv=("pytest", "-q", "tests/"), time=T0 + 2 * MS)
    out, _ = run(declaration("c3" * 8, "pytest -q tests/", T0, T0 + 100 * MS) + p.observations())
    [bridge] = links(out)
    assert bridge.evidence.attribution == Attribution.HEURISTIC
    start = p.observations()[0]
    assert start.id in bridge.evidence.support
    assert bridge.object is not None
    start_facts = start.subject.facts
    assert isinstance(start_facts, ProcessFacts)
    assert bridge.object.facts == ProcessFacts(
        host_id=HOST, pid=7, start_time_ms=start_facts.start_time_ms
    )
    assert (bridge.object.key, bridge.object.label) == ("", "")


def test_exact_process_entities_carry_identity_facts_only() -> None:
    """Traceparent and resource-pid links point at process entities with identity facts only."""
    span = "d4" * 8
    child = Proc(pid=8, exe="/usr/bin/git", argv=("git", "log"), time=T0 + MS)
    child.traceparent = traceparent(span)
    agent = Proc(pid=9, exe="/usr/bin/python3", argv=("python3", "agent.py"), time=T0 - 5 * MS)
    obs = declaration(span, "git log", T0, agent_pid=9) + child.observations()
    out, _ = run(obs + agent.observations())
    by_method = {o.evidence.method: o for o in links(out)}
    for method, proc in (("traceparent", child), ("resource_pid", agent)):
        link = by_method[method]
        assert link.object is not None
        facts = link.object.facts
        assert isinstance(facts, ProcessFacts)
        assert (facts.host_id, facts.pid) == (HOST, proc.pid)
        assert (facts.executable_path, facts.argv) == (None, None)
        assert link.object.key == ""


# ------------------------------------------------------------------ enrich reads facts


def test_os_plane_span_attributes_come_from_the_facts() -> None:
    """The process span's ``process.*`` attributes are the observed facts; an unknown field
    (None) gives no attribute, and the environment's traceparent stays off."""
    p = Proc(pid=10, exe="/usr/bin/env", argv=("env",), time=T0, traceparent=traceparent("e5" * 8))
    start = p.observations()[0]
    facts = start.subject.facts
    assert isinstance(facts, ProcessFacts)
    unknown_cwd = msgspec.structs.replace(facts, cwd=None, user="alice")
    start = msgspec.structs.replace(
        start, subject=msgspec.structs.replace(start.subject, facts=unknown_cwd)
    )
    proc, sink, _ = make()
    proc.consume(Batch(observations=(start,)))
    proc.shutdown()
    [span] = [s for s in sink.spans if s.span_id == process_span_id(p.identity)]
    attrs = span.attributes
    assert attrs["process.pid"] == 10
    assert attrs["process.command_args"] == ("env",)
    assert attrs["process.executable.path"] == "/usr/bin/env"
    assert attrs["process.owner"] == "alice"
    assert "process.working_directory" not in attrs
    assert not [k for k in attrs if k.startswith("process.env.")]
    assert process_attributes(ProcessFacts(host_id=HOST, pid=1)) == {"process.pid": 1}


def test_os_plane_skips_and_counts_a_process_without_facts() -> None:
    """No span is made for a process whose entity has no facts; the skip is counted."""
    sink, telemetry = RecordingConsumer(), Telemetry()
    proc = EnrichProcessor(EnrichConfig(), sink, telemetry)
    p = Proc(pid=11, exe="/usr/bin/ls", argv=("ls",), time=T0, extra=KNOWN_PARENT)
    proc.consume(Batch(observations=tuple(without_facts(o) for o in p.observations())))
    proc.shutdown()
    assert not [s for s in sink.spans if s.span_id == process_span_id(p.identity)]
    assert telemetry.total("os_plane.skipped.no_facts", kind=PROCESSOR, type="enrich") == 3


def test_enrich_hold_follows_correlate_defaults() -> None:
    """enrich's default hold is correlate's default window plus lateness plus the margin."""
    correlate = Config()
    expected = correlate.max_window + correlate.allowed_lateness + HOLD_MARGIN_S
    assert EnrichConfig().hold_delay == pytest.approx(expected)


# ------------------------------------------------------------------ one home for helpers

ONE_HOME = tuple(
    node.name
    for node in ast.parse((PACKAGE / "identity.py").read_text(encoding="utf-8")).body
    if isinstance(node, ast.FunctionDef) and not node.name.startswith("_")
)
"""Helpers defined once, in ``otel_bridge/identity.py``: every public function there."""


def _definitions() -> dict[str, list[str]]:
    found: dict[str, list[str]] = {name: [] for name in ONE_HOME}
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(ROOT).as_posix()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                continue
            if node.name in found:
                found[node.name].append(rel)
    return found


def test_identity_helpers_are_defined_exactly_once() -> None:
    """Each identity helper (time, traceparent, attribute, key, address) has exactly one
    definition: in identity.py."""
    assert {"iso_to_ms", "parse_traceparent", "str_value", "is_loopback"} <= set(ONE_HOME)
    assert _definitions() == {name: ["otel_bridge/identity.py"] for name in ONE_HOME}


def test_iso_times_are_parsed_only_in_identity() -> None:
    """No copy of the ISO time parser under another name: ``fromisoformat`` is called only in
    identity.py (``iso_to_ms``)."""
    callers = sorted(
        path.relative_to(ROOT).as_posix()
        for path in PACKAGE.rglob("*.py")
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
        if isinstance(node, ast.Attribute) and node.attr == "fromisoformat"
    )
    assert set(callers) == {"otel_bridge/identity.py"}


def test_correlate_and_enrich_define_no_attribute_readers() -> None:
    """No private reader copies (``_s``, ``_str``, ``_int``) in correlate or enrich."""
    files = [*(PACKAGE / "processors" / "correlate").glob("*.py")]
    files.append(PACKAGE / "processors" / "enrich.py")
    defined = {
        (path.name, node.name)
        for path in files
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
        if isinstance(node, ast.FunctionDef) and node.name in ("_s", "_str", "_int", "_identity")
    }
    assert defined == set()


def _imports_from(path: Path) -> list[tuple[str, str]]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    return [
        (node.module or "", alias.name)
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom)
        for alias in node.names
    ]


def test_enrich_imports_no_private_name_from_correlate() -> None:
    """enrich takes from correlate only public names of its neutral ``shared`` module."""
    correlate = [
        (mod, name)
        for mod, name in _imports_from(PACKAGE / "processors" / "enrich.py")
        if mod.startswith("otel_bridge.processors.correlate")
    ]
    assert correlate, "enrich reads correlate's defaults and process view from somewhere"
    assert [(m, n) for m, n in correlate if n.startswith("_") or "._" in m] == []
    assert {m for m, _ in correlate} == {"otel_bridge.processors.correlate.shared"}


def test_exact_linking_does_not_import_the_heuristic_module() -> None:
    """The exact linker depends on no part of the singleton heuristic."""
    modules = {m for m, _ in _imports_from(PACKAGE / "processors" / "correlate" / "exact.py")}
    assert "otel_bridge.processors.correlate.singleton" not in modules
