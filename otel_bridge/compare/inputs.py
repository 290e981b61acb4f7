"""What ``compare`` reads from one run: its tool calls, their processes and files, its metrics.

A run comes from a run directory (``manifest.json`` names its run id, ``graph.json`` holds the
evidence graph, ``sem.jsonl`` the spans). Everything structural is read from the graph's typed
``facts`` and stable ``key``s (``docs/graph.md``); only what the graph does not keep is read from
the spans: a tool call's arguments and result, token counts, cost and the outcome score.
:func:`extract_run` works on an in-memory graph document, so benchmarks and tests can feed
synthetic documents without a run directory.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import orjson

from otel_bridge.errors import DecodeError
from otel_bridge.graph import reading, validate_document
from otel_bridge.identity import reaches_listener, str_value, tool_call_key
from otel_bridge.model import AnyValue, LogRecord, Span
from otel_bridge.otlp import json_codec
from otel_bridge.otlp.records import Decoded
from otel_bridge.processors.normalize.ancestry import Role
from otel_bridge.processors.normalize.spans import role_of

ARGUMENT_ATTRIBUTES = ("gen_ai.tool.call.arguments", "input.value")
"""Span attributes holding a tool call's arguments: GenAI semconv first, then OpenInference."""
RESULT_ATTRIBUTES = ("gen_ai.tool.call.result", "output.value")
"""Span attributes holding a tool call's result, in the same order."""
SCORE_ATTRIBUTE = "gen_ai.evaluation.score.value"
"""The outcome score: on the resource, a span, a span event or a log record (the
``gen_ai.evaluation.result`` event)."""
COST_ATTRIBUTE = "gen_ai.usage.cost"
"""Cost, when a producer states it (not in the GenAI semantic conventions; summed when present)."""
TOKEN_ATTRIBUTES = {
    "input": ("gen_ai.usage.input_tokens", "llm.token_count.prompt", "gen_ai.usage.prompt_tokens"),
    "output": (
        "gen_ai.usage.output_tokens",
        "llm.token_count.completion",
        "gen_ai.usage.completion_tokens",
    ),
}
"""Where a model call states its tokens, first found wins: GenAI semantic conventions,
OpenInference, the GenAI conventions' deprecated names (older instrumentations)."""

READ_RELATIONS = frozenset({"read", "opened"})
"""Relations of a read (an ``opened`` edge is a read unless its access was a write). What is a
write and what reached an endpoint is ``otel_bridge.graph.reading``'s rule, shared with report and
review: a ``wrote``/``created``/``renamed``/``deleted`` edge or an open for writing; a
``connected_to`` edge or a connect begun and not seen to fail."""


@dataclass(frozen=True, slots=True)
class ToolIO:
    """A tool call's arguments and result as its span stated them (JSON-decoded when JSON)."""

    arguments: Any = None
    result: Any = None
    error: bool = False


@dataclass(slots=True)
class FileAccess:
    """One process's access to one file: the earliest and latest time the OS plane saw it."""

    process: str
    file: str
    first: int
    last: int
    observed: str = ""
    """For a write: ``written`` or ``opened_for_writing`` (the strongest of the pair's edges)."""


@dataclass(slots=True)
class Call:
    """One tool call of a run, with the processes it ran and their file accesses."""

    id: str
    tool: str
    key: str
    call_id: str | None
    start: int
    end: int
    io: ToolIO = field(default_factory=ToolIO)
    processes: list[str] = field(default_factory=list)
    reads: list[FileAccess] = field(default_factory=list)
    writes: list[FileAccess] = field(default_factory=list)
    endpoints: list[str] = field(default_factory=list)
    reached: dict[str, str] = field(default_factory=dict)
    """Endpoint id -> ``connected`` or ``attempted`` (the strongest observation)."""


@dataclass(slots=True)
class RunData:
    """Everything ``compare`` uses of one run."""

    id: str
    path: str
    calls: list[Call]
    keys: dict[str, str]
    metrics: dict[str, Any]
    paths: dict[str, str] = field(default_factory=dict)
    """File node id -> the path its facts state."""
    writes_by_file: dict[str, list[FileAccess]] = field(default_factory=dict)
    """File node id -> every write the OS plane saw in the run (by any process), by time."""
    flat: list[Any] | None = None
    """Cache of every call's flattened arguments and result (``provenance.flatten_io``)."""


def _json_value(text: AnyValue) -> Any:
    if not isinstance(text, str):
        return text
    try:
        return json.loads(text)
    except ValueError:
        return text


def _first(attrs: Mapping[str, AnyValue], names: Iterable[str]) -> AnyValue:
    for name in names:
        if name in attrs:
            return attrs[name]
    return None


def tool_io_from_spans(spans: Iterable[Span]) -> dict[tuple[str, str], ToolIO]:
    """(trace id hex, span id hex) -> arguments and result of every span that states either."""
    out: dict[tuple[str, str], ToolIO] = {}
    for span in spans:
        args = _first(span.attributes, ARGUMENT_ATTRIBUTES)
        result = _first(span.attributes, RESULT_ATTRIBUTES)
        if args is None and result is None:
            continue
        out[(span.trace_id.hex(), span.span_id.hex())] = ToolIO(
            arguments=_json_value(args),
            result=_json_value(result),
            error=span.status.code == 2,
        )
    return out


def _number(value: AnyValue) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value)


def span_metrics(spans: Iterable[Span], logs: Iterable[LogRecord]) -> dict[str, Any]:
    """Score, tokens and cost the spans and log records state (None for what none stated)."""
    scores: list[tuple[int, float]] = []
    tokens: dict[str, int | None] = {"input": None, "output": None}
    cost: float | None = None
    agent_times: list[tuple[int, int]] = []
    for span in spans:
        role = role_of(span)
        if role is Role.AGENT:
            agent_times.append((span.start_time_unix_nano, span.end_time_unix_nano))
        for attrs, time in _attribute_sets(span):
            value = _number(attrs.get(SCORE_ATTRIBUTE))
            if value is not None:
                scores.append((time, value))
        if role is Role.MODEL:
            for name, keys in TOKEN_ATTRIBUTES.items():
                n = next(
                    (n for k in keys if (n := _number(span.attributes.get(k))) is not None), None
                )
                if n is not None:
                    tokens[name] = (tokens[name] or 0) + int(n)
        stated = _number(span.attributes.get(COST_ATTRIBUTE))
        if stated is not None:
            cost = (cost or 0.0) + stated
    for log in logs:
        for attrs in (log.attributes, log.resource.attributes):
            value = _number(attrs.get(SCORE_ATTRIBUTE))
            if value is not None:
                scores.append((log.time_unix_nano, value))
    score = max(scores)[1] if scores else None  # the latest stated score
    latency = (
        (max(t[1] for t in agent_times) - min(t[0] for t in agent_times)) / 1e6
        if agent_times
        else None
    )
    return {"score": score, "tokens": tokens, "cost": cost, "latency_ms": latency}


def _attribute_sets(span: Span) -> Iterable[tuple[Mapping[str, AnyValue], int]]:
    yield span.resource.attributes, span.start_time_unix_nano
    yield span.attributes, span.end_time_unix_nano
    for event in span.events:
        yield event.attributes, event.time_unix_nano


def _adjacency(
    edges: Iterable[Mapping[str, Any]],
) -> tuple[dict[str, list[str]], dict[str, list[str]], dict[str, list[Mapping[str, Any]]]]:
    correlated: dict[str, list[str]] = {}
    children: dict[str, list[str]] = {}
    by_source: dict[str, list[Mapping[str, Any]]] = {}
    for edge in edges:
        relation = edge["relation"]
        if relation == "correlated_with_process":
            correlated.setdefault(edge["source"], []).append(edge["target"])
        elif relation == "spawned":
            children.setdefault(edge["source"], []).append(edge["target"])
        else:
            by_source.setdefault(edge["source"], []).append(edge)
    return correlated, children, by_source


def _subtree(roots: Iterable[str], children: Mapping[str, list[str]]) -> list[str]:
    seen: list[str] = []
    stack = sorted(roots, reverse=True)
    while stack:
        node = stack.pop()
        if node in seen:
            continue
        seen.append(node)
        stack.extend(sorted(children.get(node, ()), reverse=True))
    return seen


def _is_write(edge: Mapping[str, Any]) -> str | None:
    return reading.write_observation(edge["relation"], edge.get("attrs"))


def _write(writes: dict[tuple[str, str], FileAccess], edge: Mapping[str, Any], how: str) -> None:
    """Merge one write edge into the (process, file) pair's access."""
    first, last = edge["first_seen"] or 0, edge["last_seen"] or 0
    key = (edge["source"], edge["target"])
    found = writes.get(key)
    if found is None:
        writes[key] = FileAccess(key[0], key[1], first, last, how)
        return
    found.first, found.last = min(found.first, first), max(found.last, last)
    found.observed = reading.strongest((found.observed, how)) or how


def _accesses(
    processes: Iterable[str],
    by_source: Mapping[str, list[Mapping[str, Any]]],
    kinds: Mapping[str, str],
) -> tuple[list[FileAccess], list[FileAccess], dict[str, str]]:
    reads: list[FileAccess] = []
    writes: dict[tuple[str, str], FileAccess] = {}
    endpoints: dict[str, str] = {}
    for process in processes:
        edges = by_source.get(process, [])
        written = {e["target"] for e in edges if _is_write(e)}
        for e in edges:
            target, relation = e["target"], e["relation"]
            kind = kinds.get(target)
            seen = reading.reach_observation(relation, e.get("attrs"))
            if kind == "endpoint" and seen is not None:
                endpoints[target] = reading.strongest((endpoints.get(target, seen), seen)) or seen
            if kind != "file":
                continue
            how = _is_write(e)
            if how is not None:
                _write(writes, e, how)
            elif relation in READ_RELATIONS and target not in written:
                # an open by a process that also wrote the file is no read
                reads.append(FileAccess(process, target, e["first_seen"] or 0, e["last_seen"] or 0))
    return reads, list(writes.values()), endpoints


Listener = tuple[str, int]
"""Where the run's collector listened: (address, port) as it bound them."""


def _is_listener(facts: Mapping[str, Any], listeners: Collection[Listener]) -> bool:
    """Whether an endpoint's facts name one of ``listeners`` (a connection of the run's host to
    its own collector, :func:`otel_bridge.identity.reaches_listener`)."""
    return reaches_listener(str(facts.get("address", "")), facts.get("port"), listeners)


def _own_endpoints(
    nodes: Iterable[Mapping[str, Any]], listeners: Collection[Listener]
) -> dict[str, str]:
    """Endpoint node id -> label, for the endpoints that are the run's collector itself."""
    if not listeners:
        return {}
    return {
        n["id"]: str(n.get("label") or n["id"])
        for n in nodes
        if n["kind"] == "endpoint"
        and isinstance(n.get("facts"), Mapping)
        and _is_listener(n["facts"], listeners)
    }


def extract_run(
    run_id: str,
    path: str,
    graph: Mapping[str, Any],
    tool_io: Mapping[tuple[str, str], ToolIO],
    metrics: Mapping[str, Any] | None = None,
    *,
    trace_id: str | Collection[str] | None = None,
    collector: Collection[Listener] = (),
) -> RunData:
    """A run's calls (ordered by start time, then id) from its graph document and span data.

    With ``trace_id`` (one trace id or several), only the tool calls of those traces: one run
    of a standing collector's graph, which holds many; its process, file and endpoint counts
    are then those of its calls. ``collector``: where the run's collector listened (the OTLP
    endpoint ``observe`` gave the agent, its receivers' endpoints; :func:`collector_listeners`):
    a connection to one of them is the agent exporting to observe, not an endpoint it chose, so
    those endpoints are left out of every endpoint count and list, and named in the metrics'
    ``collector_endpoints_left_out``.
    """
    traces = {trace_id} if isinstance(trace_id, str) else trace_id
    nodes = graph["nodes"]
    own = _own_endpoints(nodes, collector)
    kinds = {n["id"]: "collector_endpoint" if n["id"] in own else n["kind"] for n in nodes}
    keys = {n["id"]: n.get("key", "") for n in nodes}
    correlated, children, by_source = _adjacency(graph["edges"])
    calls: list[Call] = []
    for node in nodes:
        facts = node.get("facts")
        if node["kind"] != "tool_call" or not facts or facts.get("type") != "tool_call":
            continue
        if traces is not None and facts.get("trace_id") not in traces:
            continue
        processes = _subtree(correlated.get(node["id"], ()), children)
        reads, writes, endpoints = _accesses(processes, by_source, kinds)
        io = tool_io.get((facts.get("trace_id", ""), facts.get("span_id", "")), ToolIO())
        calls.append(
            Call(
                id=node["id"],
                tool=facts["tool"],
                key=_call_key(node, facts),
                call_id=facts.get("call_id"),
                start=node.get("first_seen") or 0,
                end=node.get("last_seen") or 0,
                io=io,
                processes=processes,
                reads=reads,
                writes=writes,
                endpoints=sorted(endpoints),
                reached=endpoints,
            )
        )
    calls.sort(key=lambda c: (c.start, c.id))
    merged = dict(metrics or {})
    merged.update(_graph_metrics(graph, calls, kinds) if trace_id is None else _call_metrics(calls))
    merged["collector_endpoints_left_out"] = sorted(own.values())
    if merged.get("latency_ms") is None:  # no invoke_agent span: the tool calls' extent
        merged["latency_ms"] = merged["tool_span_ms"]
    del merged["tool_span_ms"]
    paths = {
        n["id"]: n["facts"]["path"]
        for n in nodes
        if n["kind"] == "file" and n.get("facts") and n["facts"].get("type") == "file"
    }
    return RunData(
        id=run_id,
        path=path,
        calls=calls,
        keys=keys,
        metrics=merged,
        paths=paths,
        writes_by_file=_writes_by_file(graph["edges"], kinds),
    )


def _call_key(node: Mapping[str, Any], facts: Mapping[str, Any]) -> str:
    """A tool call node's stable key; a graph that predates keys gets the one its facts give
    (``identity.tool_call_key``); an empty key (a call naming no tool) stays empty."""
    key = node.get("key")
    if isinstance(key, str):
        return key
    return tool_call_key(None, str(facts["tool"])) or ""


def _writes_by_file(
    edges: Iterable[Mapping[str, Any]], kinds: Mapping[str, str]
) -> dict[str, list[FileAccess]]:
    pairs: dict[tuple[str, str], FileAccess] = {}
    for edge in edges:
        how = _is_write(edge)
        if how is not None and kinds.get(edge["target"]) == "file":
            _write(pairs, edge, how)
    writes: dict[str, list[FileAccess]] = {}
    for access in pairs.values():
        writes.setdefault(access.file, []).append(access)
    for accesses in writes.values():
        accesses.sort(key=lambda a: (a.first, a.process))
    return writes


def _counted(observations: Mapping[str, str], kinds: tuple[str, str]) -> dict[str, int]:
    """How many of the counted files (or endpoints) rest on each observation kind."""
    return {k: sum(1 for o in observations.values() if o == k) for k in kinds}


def _graph_metrics(
    graph: Mapping[str, Any], calls: list[Call], kinds: Mapping[str, str]
) -> dict[str, Any]:
    nodes = graph["nodes"]
    times = [(c.start, c.end) for c in calls if c.start and c.end]
    latency = (max(t[1] for t in times) - min(t[0] for t in times)) / 1e6 if times else None
    written: dict[str, str] = {}
    reached: dict[str, str] = {}
    for e in graph["edges"]:
        target, kind = e["target"], kinds.get(e["target"])
        how = _is_write(e) if kind == "file" else None
        if how is not None:
            written[target] = reading.strongest((written.get(target, how), how)) or how
        seen = reading.reach_observation(e["relation"], e.get("attrs"))
        if kind == "endpoint" and seen is not None:
            reached[target] = reading.strongest((reached.get(target, seen), seen)) or seen
    return {
        "tool_calls": len(calls),
        "tool_span_ms": latency,
        "processes": sum(1 for n in nodes if n["kind"] == "process"),
        "files_written": len(written),
        "files_written_as": _counted(written, (reading.WRITTEN, reading.OPENED_FOR_WRITING)),
        "endpoints": len(reached),
        "endpoints_as": _counted(reached, (reading.CONNECTED, reading.ATTEMPTED)),
    }


def _call_metrics(calls: list[Call]) -> dict[str, Any]:
    times = [(c.start, c.end) for c in calls if c.start and c.end]
    written: dict[str, str] = {}
    reached: dict[str, str] = {}
    for c in calls:
        for w in c.writes:
            written[w.file] = reading.strongest((written.get(w.file, w.observed), w.observed)) or ""
        for e, how in c.reached.items():
            reached[e] = reading.strongest((reached.get(e, how), how)) or how
    return {
        "tool_calls": len(calls),
        "tool_span_ms": (max(t[1] for t in times) - min(t[0] for t in times)) / 1e6
        if times
        else None,
        "processes": len({p for c in calls for p in c.processes}),
        "files_written": len(written),
        "files_written_as": _counted(written, (reading.WRITTEN, reading.OPENED_FOR_WRITING)),
        "endpoints": len(reached),
        "endpoints_as": _counted(reached, (reading.CONNECTED, reading.ATTEMPTED)),
    }


def _read_json(path: Path) -> Any:
    try:
        return orjson.loads(path.read_bytes())
    except OSError as exc:
        raise DecodeError(f"cannot read {path}: {exc.strerror or exc}") from exc
    except orjson.JSONDecodeError as exc:
        raise DecodeError(f"{path} is not JSON: {exc}") from exc


def read_streams(path: Path) -> tuple[list[Span], list[LogRecord]]:
    """The spans and log records of a run directory's ``sem.jsonl`` (empty when absent)."""
    spans: list[Span] = []
    logs: list[LogRecord] = []
    if not path.exists():
        return spans, logs
    with path.open(encoding="utf-8") as f:
        for number, line in enumerate(f, 1):
            if '"resourceSpans"' in line:
                spans.extend(_decoded(json_codec.decode_traces, line, path, number))
            elif '"resourceLogs"' in line:
                logs.extend(_decoded(json_codec.decode_logs, line, path, number))
    return spans, logs


R = TypeVar("R", Span, LogRecord)


def _decoded(
    decode: Callable[[str], Decoded[R]], line: str, path: Path, number: int
) -> tuple[R, ...]:
    """The records of one ``sem.jsonl`` line; a record the decoder rejects is an error here
    (the file exporter writes only records a receiver accepted), named by file and line."""
    try:
        decoded = decode(line)
    except DecodeError as exc:
        raise DecodeError(f"{path}:{number}: {exc}") from None
    if decoded.rejected:
        raise DecodeError(f"{path}:{number}: {decoded.error_message}")
    return decoded.records


def review_findings(run_dir: Path) -> int | None:
    """The number of findings in the run's ``review.json``, None when there is no review."""
    path = run_dir / "review.json"
    if not path.exists():
        return None
    doc = _read_json(path)
    findings = doc.get("findings") if isinstance(doc, dict) else None
    return len(findings) if isinstance(findings, list) else None


def _not_a_run(root: Path) -> DecodeError | None:
    """Why ``root`` is not a run directory, in words that say what to give instead (a file, a
    missing path, a directory of run directories); None when it has a ``manifest.json``."""
    if (root / "manifest.json").is_file():
        return None
    if not root.exists():
        return DecodeError(f"{root}: no such run directory")
    if not root.is_dir():
        return DecodeError(f"{root} is a file: give the run directory that holds it")
    runs = sorted(p.name for p in root.iterdir() if (p / "manifest.json").is_file())
    if runs:
        shown = ", ".join(runs[:5]) + (", ..." if len(runs) > 5 else "")
        return DecodeError(
            f"{root} is not a run directory but holds {len(runs)} ({shown}): give those, "
            f"e.g. {os.path.join(str(root), '*')}"
        )
    return DecodeError(f"{root}: no manifest.json: not a run directory")


def collector_listeners(summary: Any) -> list[Listener]:
    """Where the run's collector listened, from its ``summary.json``: ``collector_endpoints``
    (every receiver's bound endpoint and the one ``observe`` gave the agent), else, in a run
    written before that list was, ``otlp.endpoint`` (the URL ``observe`` gave the agent)."""
    if not isinstance(summary, Mapping):
        return []
    out: list[Listener] = []
    for e in summary.get("collector_endpoints") or ():
        if isinstance(e, Mapping) and isinstance(e.get("port"), int):
            out.append((str(e.get("address", "")), e["port"]))
    url = (summary.get("otlp") or {}).get("endpoint")
    if isinstance(url, str) and "://" in url:
        host, _, port = url.split("://", 1)[1].rstrip("/").rpartition(":")
        if port.isdigit():
            out.append((host.strip("[]"), int(port)))
    return sorted(set(out))


def _read_dir(
    root: Path,
) -> tuple[str, dict[str, Any], list[Span], list[LogRecord], list[Listener]]:
    problem = _not_a_run(root)
    if problem is not None:
        raise problem
    manifest = _read_json(root / "manifest.json")
    if not isinstance(manifest, dict) or manifest.get("format") != "otel-bridge.manifest":
        raise DecodeError(f"{root}: manifest.json is not an otel-bridge manifest")
    run_id = str(manifest.get("run", {}).get("id") or root.name)
    graph = _read_json(root / "graph.json")
    validate_document(graph)
    spans, logs = read_streams(root / "sem.jsonl")
    summary = root / "summary.json"
    listeners = collector_listeners(_read_json(summary)) if summary.is_file() else []
    return run_id, graph, spans, logs, listeners


def _metrics(spans: list[Span], logs: list[LogRecord], root: Path) -> dict[str, Any]:
    metrics = span_metrics(spans, logs)
    metrics["score_source"] = "attribute" if metrics["score"] is not None else None
    metrics["review_findings"] = review_findings(root)
    return metrics


def load_run(run_dir: str | os.PathLike[str]) -> RunData:
    """One run directory: run id from ``manifest.json``, graph, spans, optional review."""
    root = Path(run_dir)
    run_id, graph, spans, logs, listeners = _read_dir(root)
    io = tool_io_from_spans(spans)
    metrics = _metrics(spans, logs, root)
    return extract_run(run_id, str(root), graph, io, metrics, collector=listeners)


SESSION_ATTRIBUTES = ("gen_ai.conversation.id", "session.id")
"""Span attributes that name the session (conversation) a trace belongs to."""


def load_traces(run_dir: str | os.PathLike[str], by: str = "trace") -> list[RunData]:
    """Several runs from one run directory (a standing collector's output): one per trace
    holding tool calls (``by="trace"``, id ``<run id>#<trace id>``), or one per session
    (``by="session"``, id ``<run id>#session:<session id>``): the traces whose spans state one
    session id (:data:`SESSION_ATTRIBUTES`) together; a trace that states none, or more than
    one, stays a run of its own (by trace id).

    Each run's metrics come from its traces' spans and log records only, and a review of the
    directory is not split (``review_findings`` is None).
    """
    root = Path(run_dir)
    run_id, graph, spans, logs, listeners = _read_dir(root)
    io = tool_io_from_spans(spans)
    traces = sorted(
        {
            n["facts"].get("trace_id", "")
            for n in graph["nodes"]
            if n["kind"] == "tool_call" and n.get("facts") and n["facts"].get("type") == "tool_call"
        }
    )
    groups = _sessions(spans, traces) if by == "session" else {t: [t] for t in traces}
    runs: list[RunData] = []
    for name, members in groups.items():
        mine = [s for s in spans if s.trace_id.hex() in members]
        metrics = span_metrics(mine, [r for r in logs if r.trace_id.hex() in members])
        metrics["score_source"] = "attribute" if metrics["score"] is not None else None
        metrics["review_findings"] = None
        runs.append(
            extract_run(
                f"{run_id}#{name}",
                str(root),
                graph,
                io,
                metrics,
                trace_id=members,
                collector=listeners,
            )
        )
    return runs


def _sessions(spans: Iterable[Span], traces: Iterable[str]) -> dict[str, list[str]]:
    """``session:<id>`` -> its traces, or a trace id -> [itself] when it states no one session."""
    stated: dict[str, set[str]] = {}
    for span in spans:
        for name in SESSION_ATTRIBUTES:
            value = str_value(span.attributes.get(name))
            if value is not None:
                stated.setdefault(span.trace_id.hex(), set()).add(value)
                break
    groups: dict[str, list[str]] = {}
    for trace in traces:
        sessions = stated.get(trace, set())
        name = f"session:{next(iter(sessions))}" if len(sessions) == 1 else trace
        groups.setdefault(name, []).append(trace)
    return dict(sorted(groups.items()))
