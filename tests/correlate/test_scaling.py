"""Cost and fast-path invariants of the correlator, measured in work done rather than seconds.

Timing belongs to ``benchmarks/correlation_scale.py``; here the engine's own count of the items
it visits while deciding (:attr:`SingletonEngine.work`) shows that the cost grows with the input
and not with its square, and every shortcut taken for speed is checked against the plain form
it replaces.
"""

from __future__ import annotations

import random

import msgspec
from correlate_builders import HOST, MS, T0, Proc, S, declaration, exit_obs
from hypothesis import given, settings
from hypothesis import strategies as st

from otel_bridge.identity import process_id
from otel_bridge.model import Attribution, Observation, ProcessFacts
from otel_bridge.processors.correlate import Config, Correlator
from otel_bridge.processors.correlate.index import (
    MAX_TAIL,
    CandidateIndex,
    ProcEvent,
    proc_event,
    tail_key,
    tail_keys,
)
from otel_bridge.processors.correlate.parser import scan, scan_chars


def stream(n: int, *, names: int = 500, seed: int = 1) -> list[Observation]:
    """``n`` declarations from 20 agents 50 ms apart, each with its process and 9 unrelated ones.

    ``names`` distinct commands are declared; with ``names=1`` every declaration and every true
    process shares one executable name, the worst case for the name index.
    """
    rng = random.Random(seed)
    obs: list[Observation] = []
    pid = 1000
    for i in range(n):
        start = T0 + i * 50 * MS
        tool = f"tool{i % names}"
        obs += declaration(
            f"{i + 1:016x}", f"{tool} --job {i}", start, start + 200 * MS, agent_pid=10 + i % 20
        )
        pid += 1
        obs += Proc(pid, f"/usr/bin/{tool}", (tool, "--job", str(i)), start + 5 * MS).observations()
        for _ in range(9):
            pid += 1
            noise = f"noise{rng.randrange(200)}"
            t = start + rng.randrange(50) * MS
            obs += Proc(
                pid, f"/usr/bin/{noise}", (noise, str(rng.randrange(1000))), t
            ).observations()
    obs.sort(key=lambda o: o.time_unix_nano)
    return obs


def work(obs: list[Observation], batch: int) -> tuple[int, int]:
    """Items the engine visited deciding ``obs`` streamed in batches, and the bridges made."""
    core = Correlator(Config())
    out: list[Observation] = []
    for i in range(0, len(obs), batch):
        core.add(tuple(obs[i : i + batch]))
        out += core.step()
    out += core.step(final=True)
    return core.engine.work, sum(o.evidence.attribution == Attribution.HEURISTIC for o in out)


def test_decision_work_grows_linearly() -> None:
    """Four times the declarations and processes cost under six times the decision work."""
    small, small_bridges = work(stream(150), batch=100)
    large, large_bridges = work(stream(600), batch=100)
    assert (small_bridges, large_bridges) == (150, 600)
    assert small >= 150  # at least one heap entry and one candidate per declaration
    assert large / small < 6


def test_decision_work_linear_when_every_name_is_shared() -> None:
    """With one executable name for all declarations the name index still costs linear work."""
    small, _ = work(stream(150, names=1), batch=100)
    large, _ = work(stream(600, names=1), batch=100)
    assert large / small < 6


def test_one_batch_and_tiny_batches_decide_the_same_with_bounded_heap_work() -> None:
    """Streaming in batches of 7 gives the same bridges as one batch; no rescans of the pending."""
    obs = stream(120)
    one, one_bridges = work(obs, batch=len(obs))
    tiny, tiny_bridges = work(obs, batch=7)
    assert one_bridges == tiny_bridges == 120
    # Each declaration is pushed once, plus once more per later declaration cutting its window:
    # re-examining every pending declaration at each of the ~500 steps would cost far more.
    assert tiny < 3 * one


@settings(max_examples=200, deadline=None)
@given(st.lists(st.text(alphabet="ab\x00 -", max_size=3), max_size=40))
def test_tail_keys_match_tail_key_of_each_slice(argv: list[str]) -> None:
    """The incrementally built tail keys equal ``tail_key`` of every indexed argument tail."""
    args = tuple(argv)
    expected = [tail_key(args[-k:]) for k in range(1, min(len(args) - 1, MAX_TAIL) + 1)]
    assert tail_keys(args) == expected


@settings(max_examples=500, deadline=None)
@given(st.text(alphabet="ab -=./\t\r\x0b\x0c\u00a0'\"\\`$*?[~#;&|<>()\n{}!1", max_size=16))
def test_scan_fast_path_equals_character_walk(line: str) -> None:
    """The regex shortcut for plain lines returns exactly what the character walk returns."""
    assert scan(line) == scan_chars(line)


def test_proc_event_reads_the_process_facts() -> None:
    """A ProcEvent is read from the entity's ProcessFacts: argv shared, not copied; unknown
    fields (None) give no evidence (empty), never a value from the attribute strings."""
    p = Proc(101, "/usr/bin/ls", ("ls", "-la"), T0, parent_pid=7)
    obs = p.observations()[0]
    facts = obs.subject.facts
    assert isinstance(facts, ProcessFacts)
    ev = proc_event(obs)
    assert ev is not None
    assert ev.facts is facts
    assert ev.argv is facts.argv
    assert (ev.pid, ev.host_id, ev.exe_name, ev.cwd) == (101, HOST, "ls", "/work")
    assert ev.names() == frozenset({"ls"})
    assert ev.identity == p.identity
    assert ev.parent_identity == process_id(HOST, 7, None)
    unknown = msgspec.structs.replace(
        facts, argv=None, cwd=None, executable_name=None, parent_pid=None
    )
    bare = msgspec.structs.replace(obs, subject=msgspec.structs.replace(obs.subject, facts=unknown))
    ev2 = proc_event(bare)
    assert ev2 is not None
    assert (ev2.argv, ev2.cwd, ev2.exe_name, ev2.parent_identity) == ((), "", "", "")
    assert ev2.names() == frozenset({"ls"})  # from the image path alone
    assert ev2.facts.argv is None  # still unknown for whoever reads the facts


def test_proc_event_identity_from_facts_when_the_entity_has_no_id() -> None:
    """An entity without an id gets the identity its facts give (host, pid, start time)."""
    p = Proc(102, "/usr/bin/ls", ("ls",), T0, start_ms=1234)
    obs = p.observations()[0]
    anonymous = msgspec.structs.replace(obs, subject=msgspec.structs.replace(obs.subject, id=""))
    ev = proc_event(anonymous)
    assert ev is not None
    assert ev.identity == process_id(HOST, 102, 1234) == p.identity


def test_index_query_sorts_out_of_order_arrivals() -> None:
    """Events indexed out of time order are returned in (time, id) order within the window."""
    index = CandidateIndex()
    times = [5, 1, 3, 9, 2]
    for i, t in enumerate(times):
        p = Proc(200 + i, "/usr/bin/make", ("make", "all"), T0 + t * MS)
        ev = proc_event(p.observations()[0])
        assert isinstance(ev, ProcEvent)
        assert index.add(ev)
    got = index.query({"make"}, (), T0 + 2 * MS, T0 + 5 * MS)
    assert [e.time for e in got] == [T0 + 2 * MS, T0 + 3 * MS, T0 + 5 * MS]
    by_tail = index.query(set(), ("all",), T0, T0 + 9 * MS)
    assert [e.time for e in by_tail] == sorted(T0 + t * MS for t in times)
    assert len(index) == 5
    index.evict_before(T0 + 3 * MS)
    assert len(index) == 3
    assert [e.time for e in index.query({"make"}, (), T0, T0 + 9 * MS)] == [
        T0 + 3 * MS,
        T0 + 5 * MS,
        T0 + 9 * MS,
    ]


def test_eviction_ends_exited_lives_and_keeps_the_others() -> None:
    """Past the retention, an exited agent process is forgotten; one with no exit still resolves."""
    core = Correlator(Config(allowed_lateness=0.0, retention=5.0))
    kept = Proc(10, "/usr/bin/agent", ("agent",), T0)
    ended = Proc(11, "/usr/bin/agent", ("agent",), T0)
    core.add(tuple(kept.observations() + ended.observations() + [exit_obs(ended, T0 + S)]))
    out = core.step()
    for i in range(1, 101):  # a long quiet stream: the evictions run every 0.625 s of it
        filler = Proc(1000 + i, "/usr/bin/true", ("true",), T0 + i * S)
        core.add(tuple(filler.observations()))
        out += core.step()
    late = T0 + 101 * S
    obs = declaration("c1" * 8, "true", late, agent_pid=10)
    obs += declaration("c2" * 8, "true", late, agent_pid=11)
    core.add(tuple(obs))
    out += core.step(final=True)
    linked = {
        o.object.id for o in out if o.object is not None and o.evidence.method == "resource_pid"
    }
    assert linked == {kept.identity}
    assert core.counts()["exact.unresolved_pid"] == 1
