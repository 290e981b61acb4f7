"""Hypothesis properties: order independence, no derived edge without support, I1."""

from __future__ import annotations

import random

from correlate_builders import MS, T0, Proc, declaration, traceparent
from hypothesis import given, settings
from hypothesis import strategies as st

from otel_bridge.model import BRIDGE_SKIP_ATTR, Attribution, EntityKind, Observation
from otel_bridge.processors.correlate import Config, Correlator

COMMANDS = ["ls -la", "pytest -q", "python3 a.py", "git status", "make", "cd /", "ls | wc"]
IMAGES = [
    ("/usr/bin/ls", ("ls", "-la")),
    ("/usr/bin/ls", ("ls",)),
    ("/usr/bin/pytest", ("pytest", "-q")),
    ("/usr/bin/python3.11", ("python3", "a.py")),
    ("/usr/bin/python3.11", ("python3", "b.py")),
    ("/usr/bin/git", ("git", "status")),
    ("/usr/bin/make", ("make",)),
]


@st.composite
def scenarios(draw: st.DrawFn) -> list[Observation]:
    """A random mix of declarations (some exactly propagated) and compatible-looking processes."""
    obs: list[Observation] = []
    n_decl = draw(st.integers(1, 5))
    spans = []
    for i in range(n_decl):
        span = f"{i + 1:016x}"
        spans.append(span)
        start = T0 + draw(st.integers(0, 4000)) * MS
        end = start + draw(st.integers(0, 4000)) * MS if draw(st.booleans()) else 0
        obs += declaration(
            span,
            draw(st.sampled_from(COMMANDS)),
            start,
            end,
            agent_pid=draw(st.sampled_from([None, 10, 11])),
        )
    for j in range(draw(st.integers(0, 8))):
        exe, argv = draw(st.sampled_from(IMAGES))
        p = Proc(pid=100 + j, exe=exe, argv=argv, time=T0 + draw(st.integers(0, 8000)) * MS)
        if draw(st.integers(0, 4)) == 0:
            p.traceparent = traceparent(draw(st.sampled_from(spans)))
        obs += p.observations()
    return obs


def derive(batches: list[list[Observation]], lateness: float = 30.0) -> list[Observation]:
    """Run the correlator over ``batches`` and return every derived observation."""
    core = Correlator(Config(allowed_lateness=lateness))
    out: list[Observation] = []
    for b in batches:
        core.add(tuple(b))
        out += core.step()
    out += core.step(final=True)
    return out


def key(obs: list[Observation]) -> list[tuple[object, ...]]:
    """A comparable digest of derived observations."""
    return sorted(
        (
            o.id,
            o.subject.id,
            o.object.id if o.object else "",
            o.evidence,
            tuple(o.attrs.items()),
            "" if o.relation else o.subject.attrs.get(BRIDGE_SKIP_ATTR, ""),
        )
        for o in obs
    )


@settings(max_examples=150, deadline=None)
@given(scenarios(), st.randoms(use_true_random=False), st.integers(1, 6))
def test_order_independent(obs: list[Observation], rnd: random.Random, n_batches: int) -> None:
    """Shuffling the observations across batches does not change the derived set."""
    reference = derive([obs])
    shuffled = list(obs)
    rnd.shuffle(shuffled)
    cuts = sorted(rnd.randint(0, len(shuffled)) for _ in range(n_batches - 1))
    batches = [shuffled[a:b] for a, b in zip([0, *cuts], [*cuts, len(shuffled)], strict=True)]
    assert key(derive(batches)) == key(reference)


@settings(max_examples=60, deadline=None)
@given(scenarios(), st.randoms(use_true_random=False))
def test_order_independent_within_lateness(obs: list[Observation], rnd: random.Random) -> None:
    """With a short lateness, disorder smaller than the lateness changes nothing either."""
    reference = derive([obs], lateness=10.0)
    ordered = sorted(obs, key=lambda o: (o.time_unix_nano, rnd.random()))
    batches = [ordered[i : i + 3] for i in range(0, len(ordered), 3)]
    for b in batches:
        rnd.shuffle(b)
    assert key(derive(batches, lateness=10.0)) == key(reference)


@settings(max_examples=150, deadline=None)
@given(scenarios())
def test_no_derived_edge_without_support(obs: list[Observation]) -> None:
    """Every derived edge cites support that exists in the input, on both sides; a skipped
    call's sighting (why the bridge linked nothing to it) relates nothing and cites its
    declaration."""
    ids = {o.id for o in obs}
    for d in derive([obs]):
        assert d.evidence.support, d
        assert set(d.evidence.support) <= ids
        if d.relation is None:
            assert d.object is None, d
            assert d.subject.kind == EntityKind.TOOL_CALL, d
            assert d.subject.attrs[BRIDGE_SKIP_ATTR], d
            assert d.evidence.method == "singleton", d
            assert d.evidence.causal is None, d
            continue
        assert d.evidence.causal is False
        if d.evidence.attribution == Attribution.HEURISTIC:
            assert d.evidence.inferred is True
            assert 0.80 <= (d.evidence.score or 0) <= 0.95
            assert "time_delta_ms" in d.attrs
        else:
            assert d.evidence.identity_exact is True
            assert d.evidence.inferred is False


@settings(max_examples=150, deadline=None)
@given(scenarios())
def test_at_most_one_bridge_per_process_and_declaration(obs: list[Observation]) -> None:
    """No process gets two heuristic bridges, and no declaration gets two."""
    bridges = [d for d in derive([obs]) if d.evidence.attribution == Attribution.HEURISTIC]
    procs = [b.object.id for b in bridges if b.object]
    tools = [b.subject.id for b in bridges]
    assert len(procs) == len(set(procs))
    assert len(tools) == len(set(tools))
