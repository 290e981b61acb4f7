"""Build the review of a run directory: ``review.json``, ``review.md`` and ``records.jsonl``.

Deterministic: the same run directory gives byte-identical files (orjson, sorted keys; every list
sorted by id or time). ``docs/review.md`` is the contract.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import msgspec
import orjson

from otel_bridge import schemas
from otel_bridge.errors import DecodeError, OtelBridgeError
from otel_bridge.gcpause import gc_paused
from otel_bridge.graph.document import FORMAT as GRAPH_FORMAT
from otel_bridge.graph.document import VERSION as GRAPH_VERSION
from otel_bridge.graph.document import GraphNode
from otel_bridge.model import Facts
from otel_bridge.review import claims as claims_mod
from otel_bridge.review import evidence as ev
from otel_bridge.review import findings as findings_mod
from otel_bridge.review import workflow as wf
from otel_bridge.review.records import read_records, stream_files
from otel_bridge.review.render import render_markdown
from otel_bridge.review.types import EvidenceNode
from otel_bridge.rundir import (
    GRAPH,
    MANIFEST,
    SUMMARY,
    RunDir,
    verify,
    write_private,
    write_private_blocks,
)

FORMAT = "otel-bridge.review"
VERSION = 1
"""2 added the artifacts' ``write_observed``/``reach_observed`` and content fields
(``docs/review.md``)."""
REVIEW_JSON = "review.json"
REVIEW_MD = "review.md"
RECORDS = "review-records.jsonl"


@dataclass(frozen=True, slots=True)
class GraphRead:
    """What the review reads of ``graph.json``: its run, summary and indexed nodes and edges."""

    run: dict[str, Any]
    summary: dict[str, Any]
    index: ev.GraphIndex


class _NodeIn(msgspec.Struct, frozen=True, gc=False):
    """The fields of a ``graph.json`` node the review reads."""

    id: str
    kind: str
    label: str = ""
    key: str = ""
    facts: Facts | None = None
    first_seen: int | None = None
    last_seen: int | None = None


class _GraphIn(msgspec.Struct, frozen=True):
    """What the review reads of ``graph.json``, decoded straight into typed records."""

    nodes: list[_NodeIn]
    edges: list[ev.GEdge]
    format: Any = None
    version: Any = None
    run: Any = None
    summary: Any = None


_GRAPH_DECODER = msgspec.json.Decoder(_GraphIn)


def read_graph(path: str) -> GraphRead:
    """``graph.json``, format and version checked, facts typed; not schema-validated.

    Full JSON Schema validation costs seconds per 100,000 edges and the review reads only typed
    fields, so it checks what it relies on (``otel-bridge graph`` validates the whole document).
    The document is decoded straight into the light records the review reads; one that does not
    fit them (a null grade or support, or a malformed document) is read by
    :func:`read_graph_generic`, which gives the same index or names the problem.
    """
    try:
        with open(path, "rb") as f:
            raw = f.read()
    except OSError as exc:
        raise DecodeError(f"cannot read {path}: {exc}") from exc
    try:
        doc = _GRAPH_DECODER.decode(raw)
    except msgspec.DecodeError:
        return read_graph_generic(path, raw)
    if doc.format != GRAPH_FORMAT or doc.version != GRAPH_VERSION:
        return read_graph_generic(path, raw)
    nodes = (
        GraphNode(
            id=n.id,
            kind=n.kind,
            label=n.label,
            key=n.key,
            facts=n.facts,
            first_seen=n.first_seen,
            last_seen=n.last_seen,
        )
        for n in doc.nodes
    )
    index = ev.GraphIndex.of(nodes, doc.edges)
    return GraphRead(run=doc.run or {}, summary=doc.summary or {}, index=index)


def read_graph_generic(path: str, raw: bytes) -> GraphRead:
    """``graph.json`` decoded as plain JSON first (the reference :func:`read_graph` agrees with;
    it reads nulls where the light records have defaults, and names what is wrong)."""
    try:
        doc = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise DecodeError(f"cannot read {path}: {exc}") from exc
    if not isinstance(doc, dict) or doc.get("format") != GRAPH_FORMAT:
        raise DecodeError(f"{path} is not an otel-bridge graph document")
    if doc.get("version") != GRAPH_VERSION:
        version = doc.get("version")
        raise DecodeError(f"{path}: graph version {version!r}, review reads {GRAPH_VERSION}")
    try:
        index = ev.GraphIndex.of(
            (_node(n) for n in doc["nodes"]), (ev.GEdge.of(e) for e in doc["edges"])
        )
    except (KeyError, TypeError, msgspec.ValidationError) as exc:
        raise DecodeError(f"{path}: malformed graph document ({exc!r})") from exc
    return GraphRead(run=doc.get("run") or {}, summary=doc.get("summary") or {}, index=index)


def _node(d: dict[str, Any]) -> GraphNode:
    facts = d.get("facts")
    return GraphNode(
        id=d["id"],
        kind=d["kind"],
        label=d.get("label") or "",
        key=d.get("key") or "",
        facts=None if facts is None else msgspec.convert(facts, Facts),
        first_seen=d.get("first_seen"),
        last_seen=d.get("last_seen"),
    )


def coverage_of(graph: GraphRead) -> claims_mod.Coverage:
    """Whether the file and process collections were ``available`` (absence is then evidence)."""
    counts = graph.summary.get("coverage") or {}

    def available(name: str) -> bool:
        states = {k.rsplit(".", 1)[-1] for k in counts if k.startswith(f"collection.{name}.")}
        return states == {"available"}

    return claims_mod.Coverage(files=available("file"), processes=available("process"))


def _session_review(
    session: ev.Session, touches: wf.Touches, coverage: claims_mod.Coverage
) -> dict[str, list[Any]]:
    workflow = wf.workflow_nodes(session, touches)
    edges = wf.artifact_edges(session, touches)
    edges += wf.informs_edges(session, edges)
    edges += wf.checked_by_edges(session, edges)
    edges += wf.frames_edges(session, workflow)
    claims, supports = claims_mod.build_claims(session, coverage)
    edges += supports
    findings = findings_mod.build_findings(session, edges, claims)
    return {"workflow": workflow, "edges": edges, "claims": claims, "findings": findings}


def build_review(
    run_dir: str, transcripts: tuple[str, ...] = ()
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The ``review.json`` document of ``run_dir`` and its trace records (with the records of
    the given Codex rollout files, ``transcripts``).

    The cyclic garbage collector is paused meanwhile: a long run's review allocates millions of
    objects that hold no cycles, and the collector's passes over them cost a fifth of the time.
    """
    with gc_paused():
        return _build_review(run_dir, transcripts)


def _build_review(
    run_dir: str, transcripts: tuple[str, ...] = ()
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    run_dir = os.path.abspath(run_dir)
    graph_path = os.path.join(run_dir, GRAPH)
    if not os.path.isdir(run_dir):
        raise OtelBridgeError(f"review: {run_dir} is not a run directory (give the directory)")
    if not os.path.exists(graph_path):
        raise OtelBridgeError(f"review: {run_dir} has no {GRAPH}")
    graph = read_graph(graph_path)
    index = graph.index
    records = read_records(run_dir)
    coverage = coverage_of(graph)
    sessions = ev.find_sessions(records)
    for session in sessions:
        ev.add_tool_calls(session, index, records)
        ev.add_span_agents(session, index)
    # coding agents (imported here: the importers read the review's records module)
    from otel_bridge.importers.sessions import import_sessions  # noqa: PLC0415

    traced = ev.traced_prompts(sessions)  # the Claude Code prompts its own spans told
    for imported in import_sessions(run_dir, records, index, transcripts):
        windows = traced.get(imported.trace_id) if "agent:claude_code" in imported.agents else None
        left = ev.untraced_part(imported, windows) if windows else imported
        if left is not None:
            sessions.append(left)
    claimed = {pid for s in sessions for pid, owner in s.owner.items() if owner != pid}
    parts: dict[str, list[Any]] = {"workflow": [], "edges": [], "claims": [], "findings": []}
    for session in sessions:  # every session's agent process first: who shares one
        ev.link_agent_processes(session, index, records, rivals=sessions)
    context = ev.context_links(index)  # processes that carried an agent's trace context
    for session in sessions:
        ev.add_agent_processes(session, index, records, claimed, rivals=sessions, context=context)
        ev.add_messages(session, records)
        touches = ev.add_artifacts(session, index, records, run_dir, rivals=sessions)
        for key, values in _session_review(session, touches, coverage).items():
            parts[key].extend(values)
    doc = {
        "format": FORMAT,
        "version": VERSION,
        "run": _run_meta(run_dir, graph, coverage),
        "records": records.counts(),
        "sessions": [_session_meta(s, parts) for s in sessions],
        "evidence": [n.to_dict() for s in sessions for n in sorted(s.nodes.values(), key=_order)],
        "workflow": [w.to_dict() for w in parts["workflow"]],
        "edges": sorted((e.to_dict() for e in parts["edges"]), key=lambda e: e["id"]),
        "claims": [c.to_dict() for c in parts["claims"]],
        "findings": [f.to_dict() for f in parts["findings"]],
    }
    return doc, [r.to_dict() for r in records.records]


def _order(node: EvidenceNode) -> tuple[int, str]:
    return (node.time or 0, node.id)


def _run_meta(run_dir: str, graph: GraphRead, coverage: claims_mod.Coverage) -> dict[str, Any]:
    summary: dict[str, Any] = {}
    path = os.path.join(run_dir, SUMMARY)
    if os.path.exists(path):
        with open(path, "rb") as f:
            summary = orjson.loads(f.read())
    run = summary.get("run") or {}
    return {
        "id": run.get("id") or graph.run.get("id"),
        "dir": run_dir,
        "command": summary.get("command"),
        "exit_code": summary.get("exit_code"),
        "streams": stream_files(run_dir),
        "coverage": {"files_available": coverage.files, "processes_available": coverage.processes},
        "graph_coverage": dict(graph.summary.get("coverage") or {}),
    }


def _session_meta(session: ev.Session, parts: dict[str, list[Any]]) -> dict[str, Any]:
    claims = [c for c in parts["claims"] if c.session == session.id]
    findings = [f for f in parts["findings"] if f.session == session.id]
    statuses = ("supported", "partially_supported", "unsupported", "contradicted")
    meta: dict[str, Any] = {
        "id": session.id,
        "trace_id": session.trace_id,
        "agents": sorted(session.agents),
        "start": session.start,
        "end": session.end,
        "claims": {s: sum(1 for c in claims if c.status == s) for s in statuses},
        "findings": {k: sum(1 for f in findings if f.kind == k) for k in findings_mod.KINDS},
    }
    if not claims:
        meta["no_claims"] = claims_mod.why_no_claims(session)
    if session.contested:
        meta["contested_writes"] = dict(sorted(session.contested.items()))
    return meta


def schema() -> dict[str, Any]:
    """The JSON Schema of ``review.json`` shipped in the package."""
    return schemas.load("review")


def validate_review(doc: Any) -> None:
    """Raise :class:`DecodeError` naming the first problems when ``doc`` breaks the schema."""
    schemas.check("review", doc)


RECORD_BLOCK = 4096
"""Records encoded per block of ``review-records.jsonl``."""


def record_lines(records: list[dict[str, Any]]) -> Iterator[bytes]:
    """``review-records.jsonl`` in blocks of :data:`RECORD_BLOCK` lines: one compact JSON object
    per record, keys sorted (msgspec's ``encode_lines``, the same bytes as ``orjson`` with
    sorted keys, a fifth of the time of one ``orjson.dumps`` call per record)."""
    encoder = msgspec.json.Encoder(order="sorted")
    for start in range(0, len(records), RECORD_BLOCK):
        yield encoder.encode_lines(records[start : start + RECORD_BLOCK])


def write_review(
    run_dir: str, out_dir: str | None = None, transcripts: tuple[str, ...] = ()
) -> dict[str, Any]:
    """Review ``run_dir`` and write the review files into ``out_dir`` (default: ``run_dir``).

    Writing into a run directory whose manifest verifies re-digests it afterwards, so
    ``otel-bridge verify`` still passes; a directory whose manifest does not verify keeps it as
    it is (the review does not vouch for files that changed).
    """
    doc, records = build_review(run_dir, transcripts)
    validate_review(doc)
    target = os.path.abspath(out_dir or run_dir)
    if not (os.path.isdir(target) and not os.path.islink(target)):
        RunDir.create(target)  # a new output directory (an existing one is written into)
    manifest = os.path.join(target, MANIFEST)
    redigest = os.path.exists(manifest) and not verify(target)
    write_private(
        os.path.join(target, REVIEW_JSON),
        orjson.dumps(
            doc, option=orjson.OPT_SORT_KEYS | orjson.OPT_APPEND_NEWLINE | orjson.OPT_INDENT_2
        ),
    )
    write_private(os.path.join(target, REVIEW_MD), render_markdown(doc).encode())
    write_private_blocks(os.path.join(target, RECORDS), record_lines(records))
    if redigest:
        RunDir(target).redigest()
    return doc
