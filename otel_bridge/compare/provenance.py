"""One run's provenance graph in PROV terms, and its dependency edges by method.

Activities are tool calls and the processes they ran; entities are each call's arguments and
result, the files the processes read or wrote and the endpoints they reached. Structural edges
(``used``, ``wasGeneratedBy``, ``wasInformedBy``) carry method ``reported`` (stated by a span) or
``observed`` (seen by the OS plane). Dependency edges between two tool calls are
``wasInformedBy`` from the later (informed) call to the earlier (informant) one, each with exactly
one method, never merged:

* ``exact_reference``: a scalar of the later call's arguments equals a value or key of the
  earlier call's result (strings of at least 4 characters, non-integral numbers, integers of
  magnitude 1000 or more; booleans and small integers are too common to count). The most recent
  earlier result holding the value is the informant.
* ``observed_dataflow``: a process of the later call opened a file it did not write, and the most
  recent earlier write to that file (by any process of the run) was by a process of the earlier
  call. The edge names the file, both processes and both times.
* ``candidate``: the later call's arguments share word tokens (4+ characters, lower-cased, minus
  tokens found in more than half the run's calls) with the earlier call's result, and no exact
  edge joins the two. Flagged ``candidate: true`` and scored: shared / argument tokens.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from .inputs import Call, RunData

EXACT = "exact_reference"
OBSERVED = "observed_dataflow"
CANDIDATE = "candidate"
METHODS = (EXACT, OBSERVED, CANDIDATE)
CONFIRMED = frozenset({EXACT, OBSERVED})
"""Methods that are evidence, not guesses: only these edges reach the joined graph."""

_TOKEN = re.compile(r"[A-Za-z][A-Za-z0-9_]{3,}")


@dataclass(slots=True)
class Dependency:
    """A dependency of ``consumer`` on ``producer`` (call indices in the run) by one method."""

    producer: int
    consumer: int
    method: str
    score: float
    via: str
    detail: dict[str, Any] = field(default_factory=dict)


Flat = list[tuple[str, Any, bool]]


def _flatten(value: Any, path: str, out: Flat) -> Flat:
    """Append (path, scalar, is_key) for every scalar and every object key below ``value``."""
    if isinstance(value, dict):
        for k, v in value.items():
            sub = f"{path}.{k}" if path else str(k)
            out.append((sub, str(k), True))
            _flatten(v, sub, out)
    elif isinstance(value, list):
        for item in value:
            _flatten(item, f"{path}[]", out)
    elif value is not None:
        out.append((path, value, False))
    return out


def flatten_io(run: RunData) -> list[tuple[Flat, Flat]]:
    """Every call's arguments and result, flattened once (cached on the run)."""
    if run.flat is None:
        run.flat = [
            (_flatten(c.io.arguments, "", []), _flatten(c.io.result, "", [])) for c in run.calls
        ]
    flat: list[tuple[Flat, Flat]] = run.flat
    return flat


def reference_value(value: Any) -> tuple[str, Any] | None:
    """The comparable form of a scalar that may count as a reference, None if too common."""
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, str):
        return ("s", value) if len(value) >= 4 else None
    if isinstance(value, int):
        return ("n", float(value)) if abs(value) >= 1000 else None
    if isinstance(value, float):
        return ("n", value) if value != int(value) or abs(value) >= 1000 else None
    return None


def exact_references(calls: list[Call], flat: list[tuple[Flat, Flat]]) -> list[Dependency]:
    """``exact_reference`` edges: arguments naming a value or key of the latest earlier result."""
    latest: dict[tuple[str, Any], tuple[int, str]] = {}
    out: dict[tuple[int, int], Dependency] = {}
    for i, (args, result) in enumerate(flat):
        if args:
            for arg_path, value, is_key in args:
                ref = None if is_key else reference_value(value)
                if ref is None or ref not in latest:
                    continue
                producer, result_path = latest[ref]
                dep = out.setdefault(
                    (producer, i),
                    Dependency(producer, i, EXACT, 1.0, f"result:{calls[producer].id}"),
                )
                dep.detail.setdefault("arguments", []).append(arg_path)
                dep.detail.setdefault("result", []).append(result_path)
        for res_path, value, _ in result:
            ref = reference_value(value)
            if ref is not None:
                latest[ref] = (i, res_path)
    for dep in out.values():
        dep.detail = {k: sorted(set(v)) for k, v in dep.detail.items()}
    return sorted(out.values(), key=lambda d: (d.consumer, d.producer))


def observed_dataflow(run: RunData) -> list[Dependency]:
    """``observed_dataflow`` edges: a file one call's process wrote, later opened by another's."""
    owner = {p: i for i, call in enumerate(run.calls) for p in call.processes}
    out: dict[tuple[int, int, str], Dependency] = {}
    for i, call in enumerate(run.calls):
        for read in call.reads:
            writes = [w for w in run.writes_by_file.get(read.file, ()) if w.first <= read.last]
            if not writes:
                continue
            write = writes[-1]  # the latest write before the read: what the reader saw
            producer = owner.get(write.process)
            if producer is None or producer == i or producer > i:
                continue
            key = (producer, i, read.file)
            if key in out:
                continue
            out[key] = Dependency(
                producer,
                i,
                OBSERVED,
                1.0,
                read.file,
                {
                    "path": run.paths.get(read.file),
                    "writer": write.process,
                    "written": write.first,
                    "reader": read.process,
                    "read": read.last,
                },
            )
    return sorted(out.values(), key=lambda d: (d.consumer, d.producer, d.via))


def _tokens(flat: Flat) -> set[str]:
    text = "\n".join(scalar for _, scalar, _ in flat if isinstance(scalar, str))
    return set(_TOKEN.findall(text.lower())) if text else set()


def candidates(
    calls: list[Call], flat: list[tuple[Flat, Flat]], exact: list[Dependency]
) -> list[Dependency]:
    """``candidate`` edges: shared word tokens between arguments and the latest earlier result."""
    arg_tokens = [_tokens(a) for a, _ in flat]
    res_tokens = [_tokens(r) for _, r in flat]
    frequency: dict[str, int] = {}
    for a, r in zip(arg_tokens, res_tokens, strict=True):
        for token in a | r:
            frequency[token] = frequency.get(token, 0) + 1
    common = {t for t, n in frequency.items() if n * 2 > len(calls)} if len(calls) >= 4 else set()
    linked = {(d.producer, d.consumer) for d in exact}
    latest: dict[str, int] = {}
    out: list[Dependency] = []
    for i in range(len(calls)):
        wanted = arg_tokens[i] - common
        shared: dict[int, list[str]] = {}
        for token in wanted:
            if token in latest:
                shared.setdefault(latest[token], []).append(token)
        for producer in sorted(shared):
            if (producer, i) in linked:
                continue
            score = round(len(shared[producer]) / len(wanted), 4)
            detail = {"tokens": sorted(shared[producer]), "candidate": True}
            out.append(
                Dependency(producer, i, CANDIDATE, score, f"result:{calls[producer].id}", detail)
            )
        for token in res_tokens[i] - common:
            latest[token] = i
    return out


def dependencies(run: RunData) -> list[Dependency]:
    """Every dependency edge of the run, by method."""
    flat = flatten_io(run)
    exact = exact_references(run.calls, flat)
    return [*exact, *observed_dataflow(run), *candidates(run.calls, flat, exact)]


def _edge(source: str, target: str, relation: str, method: str, **extra: Any) -> dict[str, Any]:
    return {
        "source": source,
        "target": target,
        "relation": relation,
        "method": method,
        "score": None,
        **extra,
    }


def _structure(
    run: RunData,
) -> tuple[list[dict[str, Any]], list[dict[str, Any]], list[dict[str, Any]]]:
    activities: list[dict[str, Any]] = []
    entities: dict[str, dict[str, Any]] = {}
    edges: list[dict[str, Any]] = []
    for call in run.calls:
        activities.append(
            {
                "id": call.id,
                "type": "tool_call",
                "tool": call.tool,
                "key": call.key,
                "call_id": call.call_id,
                "start": call.start,
                "end": call.end,
                "error": call.io.error,
            }
        )
        for kind, value, relation in (
            ("arguments", call.io.arguments, "used"),
            ("result", call.io.result, "wasGeneratedBy"),
        ):
            if value is None:
                continue
            entity = f"{kind}:{call.id}"
            entities[entity] = {"id": entity, "type": kind, "call": call.id}
            pair = (call.id, entity) if relation == "used" else (entity, call.id)
            edges.append(_edge(*pair, relation, "reported"))
        for process in call.processes:
            activities.append(
                {
                    "id": process,
                    "type": "process",
                    "key": run.keys.get(process, ""),
                    "call": call.id,
                }
            )
            edges.append(_edge(process, call.id, "wasInformedBy", "observed"))
        for access, relation in [
            *((r, "used") for r in call.reads),
            *((w, "wasGeneratedBy") for w in call.writes),
        ]:
            entities[access.file] = {
                "id": access.file,
                "type": "file",
                "key": run.keys.get(access.file, ""),
                "path": run.paths.get(access.file),
            }
            pair = (
                (access.process, access.file)
                if relation == "used"
                else (access.file, access.process)
            )
            # a write seen only as an open for writing (strace, ebpf) says so in its method
            method = "opened_for_writing" if access.observed == "opened_for_writing" else "observed"
            edges.append(_edge(*pair, relation, method, time=access.first))
        for endpoint in call.endpoints:
            entities[endpoint] = {
                "id": endpoint,
                "type": "endpoint",
                "key": run.keys.get(endpoint, ""),
            }
            for process in call.processes:
                edges.append(_edge(process, endpoint, "used", "observed"))
    return activities, sorted(entities.values(), key=lambda e: e["id"]), edges


def provenance(run: RunData, deps: list[Dependency]) -> dict[str, Any]:
    """The run's ``provenance`` object of ``compare.json``."""
    activities, entities, edges = _structure(run)
    seen: set[tuple[str, str, str, str]] = set()
    unique: list[dict[str, Any]] = []
    for edge in edges:
        ident = (edge["source"], edge["target"], edge["relation"], edge["method"])
        if ident not in seen:
            seen.add(ident)
            unique.append(edge)
    for dep in deps:
        unique.append(
            _edge(
                run.calls[dep.consumer].id,
                run.calls[dep.producer].id,
                "wasInformedBy",
                dep.method,
                via=dep.via,
                detail=dep.detail,
            )
            | {"score": dep.score}
        )
    return {"activities": activities, "entities": entities, "edges": unique}
