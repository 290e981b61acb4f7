"""The compact comparison: per call a capsule number and an id offset, per-call lists of the
joined graph written piece by piece. What it writes is what the in-memory document encodes to,
byte for byte; its ablation counts what re-clustering every call would; it keeps a few bytes
per call and leaves no file behind."""

from __future__ import annotations

import gc
import random
import tracemalloc
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest
from test_compare_units import five_runs

from otel_bridge.compare import (
    CompareConfig,
    Comparison,
    RunData,
    compact,
    compare,
    materialized,
    outline,
    validate_document,
    write_document,
)
from otel_bridge.compare.joined import DEFAULT_WEIGHTS
from otel_bridge.compare.synthetic import Step, synthetic_run

OPTIONS = orjson.OPT_SORT_KEYS | orjson.OPT_INDENT_2


def plan(calls: int) -> list[Step]:
    """A chain of ``calls`` steps: each reads the previous step's file and passes a value on."""
    tools = ("fetch", "parse", "join", "plot")
    return [
        Step(
            tools[k % len(tools)],
            {"input": f"/w/{k - 1}.csv", "token": f"v{k - 1}"} if k else {"task": "t"},
            {"output": f"/w/{k}.csv", "token": f"v{k}"},
            reads=[f"/w/{k - 1}.csv"] if k else [],
            writes=[f"/w/{k}.csv"],
        )
        for k in range(calls)
    ]


def varied_runs(n: int, calls: int, seed: int = 7) -> Iterator[RunData]:
    """``n`` runs of :func:`plan` with seeded skips, detours and retries."""
    rng = random.Random(seed)
    for r in range(n):
        steps: list[Step] = []
        for step in plan(calls):
            roll = rng.random()
            if roll < 0.1 and steps:
                continue
            if roll < 0.2:
                steps.append(Step("search", {"query": step.tool}, {"hits": 2}))
            if roll > 0.9:
                steps.append(Step(step.tool, step.arguments, {"error": "x"}, reads=step.reads))
            steps.append(step)
        yield synthetic_run(f"run-{r:03d}", steps, score=rng.random())


def finished(runs: Iterator[RunData] | list[RunData], tmp_path: Path) -> tuple[bytes, Any]:
    """compare.json as the streaming writer writes it, and the materialised document."""
    with Comparison(directory=tmp_path) as comparison:
        for run in runs:
            comparison.add(run)
        doc = comparison.finish()
        validate_document({**outline(doc), "provenance": {}})
        write_document(doc, tmp_path / "compare.json")
        plain = materialized(doc)
    return (tmp_path / "compare.json").read_bytes(), plain


@pytest.mark.parametrize("chunk", [1, 3, compact.CHUNK])
def test_the_streamed_document_is_the_in_memory_document_byte_for_byte(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, chunk: int
) -> None:
    monkeypatch.setattr(compact, "CHUNK", chunk)  # members, runs and counts cross piece edges
    monkeypatch.setattr(compact, "RELEASE", 2)  # the id file's pages are released as read
    for name, runs in (("five", five_runs), ("varied", lambda: list(varied_runs(12, 15)))):
        (tmp_path / name).mkdir()
        written, plain = finished(runs(), tmp_path / name)
        assert written == orjson.dumps(plain, option=OPTIONS) + b"\n"
        in_memory = compare(runs())
        del in_memory["provenance"]
        assert plain == orjson.loads(orjson.dumps(in_memory))
        validate_document({**plain, "provenance": {}})
        assert any(len(n["members"]) > 3 for n in plain["joined"]["nodes"])
        assert sorted(p.name for p in (tmp_path / name).iterdir()) == ["compare.json"]


def co_members(doc: dict[str, Any]) -> dict[tuple[str, str], frozenset[tuple[str, str]]]:
    """(run, activity) -> every (run, activity) of its joined node."""
    out: dict[tuple[str, str], frozenset[tuple[str, str]]] = {}
    for node in doc["joined"]["nodes"]:
        group = frozenset((m["run"], m["activity"]) for m in node["members"])
        out.update(dict.fromkeys(group, group))
    return out


def test_the_ablation_counts_the_calls_whose_co_members_change() -> None:
    runs = list(varied_runs(10, 12, seed=3))
    base = compare(runs)
    assert base["joined"]["ablation"]["calls"] == sum(len(r.calls) for r in runs)
    before = co_members(base)
    changed_somewhere = 0
    for component, figures in base["joined"]["ablation"]["dropped"].items():
        weights = {m: 0.0 if m == component else w for m, w in DEFAULT_WEIGHTS.items()}
        other = compare(runs, CompareConfig(weights=weights, ablation=False))
        after = co_members(other)
        assert figures["changed"] == sum(1 for call in before if before[call] != after[call])
        assert figures["clusters"] == len(other["joined"]["nodes"])
        changed_somewhere += figures["changed"]
    assert changed_somewhere  # the set is varied enough for some weight to matter


def test_memory_held_per_call_is_a_few_bytes() -> None:
    """Identical runs (only their ids differ): what the comparison keeps grows by its arrays'
    items per call (capsule number 4 B, id offset 8 B, a run per dependency 4 B) plus each
    run's row, not by objects per call."""
    steps = plan(40)
    tracemalloc.start()
    try:
        with Comparison(CompareConfig(ablation=False)) as comparison:
            marks = []
            for r in range(40):  # each run built, compared and dropped, as the command does
                comparison.add(synthetic_run(f"run-{r:03d}", steps, score=0.5))
                if r + 1 in (10, 40):
                    gc.collect()  # what earlier tests left in cycles is not the comparison's
                    marks.append(tracemalloc.get_traced_memory()[0])
    finally:
        tracemalloc.stop()
    per_call = (marks[1] - marks[0]) / (30 * 40)
    assert per_call < 64, per_call
