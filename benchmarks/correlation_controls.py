"""Targeted attribution negative controls (ExecWeave section VII-A), per policy.

Run: ``python benchmarks/correlation_controls.py [--seeds N]``.

Fixture kinds (ground truth recorded by the generator, independently of any correlator):

* ``ambiguity``: two compatible processes of one command in the window (the true one and a
  concurrent agent's), the true one placed first or second at random.
* ``ambiguity_interpreter``: ``python3 a.py`` declared; ``python3 a.py`` (true) and an unrelated
  ``python3 other.py`` both run.
* ``ambiguity_two_declarations``: two agents declare the same command; one process is seen (the
  other agent's process was missed); it truly belongs to the second.
* ``sequential``: one agent runs the same command twice, one second apart, the spans' ends
  unknown.
* ``sequential_ended``: the same with both spans' ends known (each ends before the next starts).
* ``parallel_calls``: one agent runs ``sleep 0.3`` twice at once (two threads, overlapping
  spans); both processes are seen, each starting a few ms after its own call did, in either
  order. Nothing but time tells them apart.
* ``missed_sibling``: the same two overlapping calls, but the second call's process was missed;
  the first call's process starts after the second call began (the thread was slower), so it
  lies in both calls' windows. It must never be bridged to the second call.
* ``false_uniqueness``: the true process is missing; one compatible impostor (another agent's
  identical command) remains, with no exact identity anywhere.
* ``false_uniqueness_exact``: the same, but the agents propagate TRACEPARENT, so the impostor
  carries its own tool span's context.
* ``exact_available``: the true process carries the declaring span's TRACEPARENT; an impostor
  without one is also present.

Policies: ``ours`` (exact identity + the strict singleton), ``paper_singleton``,
``forced_nearest``, ``exe_path_singleton``. Baselines count heuristic bridges only; ``ours``
counts exact ``traceparent`` links too. Prints correct bridges, false bridges and abstentions
per policy and fixture kind.
"""

from __future__ import annotations

import argparse
import random
import sys
from collections import Counter
from collections.abc import Callable

from correlation_fixtures import MS, T0, Fixture, declare, spawn, tool_id, tp

from otel_bridge.model import Attribution, Observation, RelationKind
from otel_bridge.processors.correlate import Config, Correlator
from otel_bridge.processors.correlate.singleton import (
    EXE_PATH_SINGLETON,
    NEAREST,
    OURS,
    PAPER,
    Policy,
)

TRACE_A = "a0" * 16
TRACE_B = "b0" * 16


def _span(rng: random.Random) -> str:
    return f"{rng.getrandbits(64):016x}"


def ambiguity(rng: random.Random) -> Fixture:
    """Two compatible processes of one command; the true one first or second."""
    fx = Fixture("ambiguity", "ambiguity")
    s1 = _span(rng)
    declare(fx, TRACE_A, s1, "pytest -q", T0, T0 + 2000 * MS, 10)
    times = [T0 + rng.randint(1, 900) * MS, T0 + rng.randint(1, 900) * MS]
    true = spawn(fx, 100, "/usr/bin/pytest", ("pytest", "-q"), times[0])
    spawn(fx, 101, "/usr/bin/pytest", ("pytest", "-q"), times[1], parent_pid=11)
    fx.truth[tool_id(TRACE_A, s1)] = true
    return fx


def ambiguity_interpreter(rng: random.Random) -> Fixture:
    """An interpreter command next to an unrelated run of the same interpreter."""
    fx = Fixture("ambiguity_interpreter", "ambiguity")
    s1 = _span(rng)
    declare(fx, TRACE_A, s1, "python3 a.py", T0, T0 + 2000 * MS, 10)
    true = spawn(fx, 100, "/usr/bin/python3.11", ("python3", "a.py"), T0 + rng.randint(1, 900) * MS)
    spawn(fx, 101, "/usr/bin/python3.11", ("python3", "other.py"), T0 + rng.randint(1, 900) * MS)
    fx.truth[tool_id(TRACE_A, s1)] = true
    return fx


def ambiguity_two_declarations(rng: random.Random) -> Fixture:
    """Two agents declare one command; one process is seen, truly either agent's (coin flip)."""
    fx = Fixture("ambiguity_two_declarations", "ambiguity")
    s1, s2 = _span(rng), _span(rng)
    declare(fx, TRACE_A, s1, "make test", T0, T0 + 2000 * MS, 10)
    declare(fx, TRACE_B, s2, "make test", T0 + 100 * MS, T0 + 2000 * MS, 11)
    owner = rng.choice((10, 11))
    seen = spawn(
        fx,
        101,
        "/usr/bin/make",
        ("make", "test"),
        T0 + rng.randint(150, 900) * MS,
        parent_pid=owner,
    )
    fx.truth[tool_id(TRACE_A, s1)] = seen if owner == 10 else None
    fx.truth[tool_id(TRACE_B, s2)] = seen if owner == 11 else None
    return fx


def sequential(rng: random.Random) -> Fixture:
    """The same command twice in sequence by one agent."""
    fx = Fixture("sequential", "ambiguity")
    s1, s2 = _span(rng), _span(rng)
    declare(fx, TRACE_A, s1, "git status", T0, 0, 10)
    declare(fx, TRACE_A, s2, "git status", T0 + 1000 * MS, 0, 10)
    t1 = spawn(fx, 100, "/usr/bin/git", ("git", "status"), T0 + rng.randint(1, 900) * MS)
    t2 = spawn(fx, 101, "/usr/bin/git", ("git", "status"), T0 + rng.randint(1001, 1900) * MS)
    fx.truth[tool_id(TRACE_A, s1)] = t1
    fx.truth[tool_id(TRACE_A, s2)] = t2
    return fx


def sequential_ended(rng: random.Random) -> Fixture:
    """The same command twice in sequence by one agent, each span ending before the next."""
    fx = Fixture("sequential_ended", "ambiguity")
    s1, s2 = _span(rng), _span(rng)
    declare(fx, TRACE_A, s1, "git status", T0, T0 + 950 * MS, 10)
    declare(fx, TRACE_A, s2, "git status", T0 + 1000 * MS, T0 + 1950 * MS, 10)
    t1 = spawn(fx, 100, "/usr/bin/git", ("git", "status"), T0 + rng.randint(1, 900) * MS)
    t2 = spawn(fx, 101, "/usr/bin/git", ("git", "status"), T0 + rng.randint(1001, 1900) * MS)
    fx.truth[tool_id(TRACE_A, s1)] = t1
    fx.truth[tool_id(TRACE_A, s2)] = t2
    return fx


def _two_overlapping_calls(fx: Fixture, rng: random.Random) -> tuple[str, str, int]:
    """Two ``sleep 0.3`` calls of one agent, the second starting 1-20 ms after the first."""
    s1, s2 = _span(rng), _span(rng)
    lag = rng.randint(1, 20)
    declare(fx, TRACE_A, s1, "sleep 0.3", T0, T0 + 320 * MS, 10)
    declare(fx, TRACE_A, s2, "sleep 0.3", T0 + lag * MS, T0 + (lag + 320) * MS, 10)
    return s1, s2, lag


def parallel_calls(rng: random.Random) -> Fixture:
    """Two overlapping identical calls, both processes seen (each a few ms after its call)."""
    fx = Fixture("parallel_calls", "ambiguity")
    s1, s2, lag = _two_overlapping_calls(fx, rng)
    t1 = spawn(
        fx, 100, "/usr/bin/sleep", ("sleep", "0.3"), T0 + rng.randint(1, 40) * MS, parent_pid=10
    )
    t2 = spawn(
        fx,
        101,
        "/usr/bin/sleep",
        ("sleep", "0.3"),
        T0 + (lag + rng.randint(1, 40)) * MS,
        parent_pid=10,
    )
    fx.truth[tool_id(TRACE_A, s1)] = t1
    fx.truth[tool_id(TRACE_A, s2)] = t2
    return fx


def missed_sibling(rng: random.Random) -> Fixture:
    """Two overlapping identical calls; only the first call's process is seen, and it starts
    after the second call began."""
    fx = Fixture("missed_sibling", "ambiguity")
    s1, s2, lag = _two_overlapping_calls(fx, rng)
    t1 = spawn(
        fx,
        100,
        "/usr/bin/sleep",
        ("sleep", "0.3"),
        T0 + (lag + rng.randint(1, 40)) * MS,
        parent_pid=10,
    )
    fx.truth[tool_id(TRACE_A, s1)] = t1
    fx.truth[tool_id(TRACE_A, s2)] = None  # its process was missed by the observer
    return fx


def _false_unique(rng: random.Random, exact: bool) -> Fixture:
    kind = "false_uniqueness_exact" if exact else "false_uniqueness"
    fx = Fixture(kind, "false_uniqueness")
    s1, other = _span(rng), _span(rng)
    declare(fx, TRACE_A, s1, "cargo build", T0, T0 + 2000 * MS, 10)
    # the true process (pid 100) was missed by the observer; another agent's remains
    spawn(
        fx,
        101,
        "/usr/bin/cargo",
        ("cargo", "build"),
        T0 + rng.randint(1, 900) * MS,
        traceparent=tp(TRACE_B, other) if exact else "",
        parent_pid=11,
    )
    fx.truth[tool_id(TRACE_A, s1)] = None
    return fx


def exact_available(rng: random.Random) -> Fixture:
    """The true process carries the declaring span's context; an impostor does not."""
    fx = Fixture("exact_available", "exact")
    s1 = _span(rng)
    declare(fx, TRACE_A, s1, "npm test", T0, T0 + 2000 * MS, 10)
    true = spawn(
        fx,
        100,
        "/usr/bin/npm",
        ("npm", "test"),
        T0 + rng.randint(1, 900) * MS,
        traceparent=tp(TRACE_A, s1),
    )
    spawn(fx, 101, "/usr/bin/npm", ("npm", "test"), T0 + rng.randint(1, 900) * MS, parent_pid=11)
    fx.truth[tool_id(TRACE_A, s1)] = true
    return fx


GENERATORS: list[Callable[[random.Random], Fixture]] = [
    ambiguity,
    ambiguity_interpreter,
    ambiguity_two_declarations,
    sequential,
    sequential_ended,
    parallel_calls,
    missed_sibling,
    lambda r: _false_unique(r, exact=False),
    lambda r: _false_unique(r, exact=True),
    exact_available,
]

POLICIES: dict[str, Policy] = {
    "ours": OURS,
    "paper_singleton": PAPER,
    "forced_nearest": NEAREST,
    "exe_path_singleton": EXE_PATH_SINGLETON,
}


def links(policy_name: str, fx: Fixture) -> dict[str, set[str]]:
    """Tool call -> processes it was linked to under one policy."""
    policy = POLICIES[policy_name]
    core = Correlator(Config(exact=policy_name == "ours"), policy)
    core.add(tuple(fx.observations))
    derived: list[Observation] = core.step(final=True)
    out: dict[str, set[str]] = {}
    for d in derived:
        if d.relation != RelationKind.CORRELATED_WITH_PROCESS or d.object is None:
            continue
        if d.evidence.attribution == Attribution.HEURISTIC or d.evidence.method == "traceparent":
            out.setdefault(d.subject.id, set()).add(d.object.id)
    return out


def evaluate(seeds: int) -> dict[tuple[str, str], Counter[str]]:
    """Counts of correct / false / abstained per (policy, fixture)."""
    table: dict[tuple[str, str], Counter[str]] = {}
    for seed in range(seeds):
        rng = random.Random(seed)
        for gen in GENERATORS:
            fx = gen(rng)
            for pname in POLICIES:
                got = links(pname, fx)
                c = table.setdefault((pname, fx.name), Counter())
                for tool, truth in fx.truth.items():
                    linked = got.get(tool, set())
                    if not linked:
                        c["abstain"] += 1
                    elif linked == {truth}:
                        c["correct"] += 1
                    else:
                        c["false"] += 1
    return table


def main(argv: list[str] | None = None) -> int:
    """Print the control table; exit 1 if our policy misses its targets."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, default=50)
    args = ap.parse_args(argv)
    table = evaluate(args.seeds)
    fixtures = [g(random.Random(0)).name for g in GENERATORS]
    print(f"{'fixture':28} {'policy':20} {'correct':>8} {'false':>6} {'abstain':>8}")
    for fx in fixtures:
        for p in POLICIES:
            c = table[(p, fx)]
            print(f"{fx:28} {p:20} {c['correct']:8} {c['false']:6} {c['abstain']:8}")
    ambiguity = (
        "ambiguity",
        "ambiguity_interpreter",
        "ambiguity_two_declarations",
        "sequential",
        "sequential_ended",
        "parallel_calls",
        "missed_sibling",
    )
    ok = all(table[("ours", f)]["false"] == 0 for f in ambiguity)
    ok = ok and table[("ours", "false_uniqueness_exact")]["false"] == 0
    ok = ok and table[("ours", "exact_available")]["false"] == 0
    print("targets met" if ok else "TARGETS MISSED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
