"""What the page shows: the documents found at a path, bundled for the browser.

A path is a run directory (its ``graph.json``, and ``review.json`` / ``summary.json`` when they
are there), the directory ``compare -o DIR`` or ``review -o DIR`` wrote (its ``compare.json``,
else its ``review.json``), a ``graph.json``, a ``review.json`` or a ``compare.json``: the
``format`` field of a JSON file says which. The bundle is plain JSON; the page draws every
view from it, so a served page, an exported file and a live page given equal bundles render
the same thing.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from otel_bridge.errors import OtelBridgeError
from otel_bridge.graph import validate_document
from otel_bridge.viewer import columns, layout

GRAPH_FORMAT = "otel-bridge.graph"
REVIEW_FORMAT = "otel-bridge.review"
COMPARE_FORMAT = "otel-bridge.compare"
SUMMARY_FILE = "summary.json"
GRAPH_FILE = "graph.json"
REVIEW_FILE = "review.json"
COMPARE_FILE = "compare.json"


@dataclass(frozen=True, slots=True)
class TraceLink:
    """A link from a trace id to a trace backend (``{trace_id}`` and ``{span_id}`` substituted)."""

    name: str
    template: str

    @classmethod
    def parse(cls, text: str) -> TraceLink:
        """``NAME=TEMPLATE`` (``phoenix=http://127.0.0.1:6006/...{trace_id}``)."""
        name, sep, template = text.partition("=")
        if not sep or not name or "{trace_id}" not in template:
            raise OtelBridgeError(
                f"--trace-link {text!r}: expected NAME=URL with {{trace_id}} in the URL"
            )
        return cls(name, template)


@dataclass(slots=True)
class Bundle:
    """The documents one page shows. ``to_page_json`` is what the browser receives."""

    source: str
    graph: dict[str, Any] | None = None
    review: dict[str, Any] | None = None
    compare: dict[str, Any] | None = None
    summary: dict[str, Any] | None = None
    trace_links: list[TraceLink] = field(default_factory=list)
    live: bool = False
    ended: bool = True

    def to_json(self) -> dict[str, Any]:
        """The JSON object the page reads (``docs/viewer.md``, *The bundle*)."""
        return {
            "format": "otel-bridge.view",
            "version": 1,
            "source": self.source,
            "graph": self.graph,
            "review": self.review,
            "compare": self.compare,
            "summary": self.summary,
            "trace_links": [{"name": t.name, "template": t.template} for t in self.trace_links],
            "live": self.live,
            "ended": self.ended,
        }

    def to_page_json(self) -> dict[str, Any]:
        """What the page receives: :meth:`to_json` with ``graph`` in columns
        (``graph_columns``, :mod:`otel_bridge.viewer.columns`) and its positions
        (``graph_columns.layout``, :mod:`otel_bridge.viewer.layout`)."""
        doc = self.to_json()
        graph = doc.pop("graph")
        if graph is None:
            doc["graph_columns"] = None
        else:
            doc["graph_columns"] = {**columns.pack(graph), "layout": layout.layout(graph)}
        doc["version"] = 2
        return doc

    def compare_run_path(self, run_id: str) -> str | None:
        """The run directory a ``compare.json`` names for ``run_id``, None when it names none."""
        for run in (self.compare or {}).get("runs", []):
            if isinstance(run, dict) and run.get("id") == run_id and run.get("path"):
                return str(run["path"])
        return None


def _read_json(path: Path) -> Any:
    try:
        with path.open("rb") as fh:
            return json.load(fh)
    except OSError as exc:
        raise OtelBridgeError(f"view: cannot read {path}: {exc.strerror or exc}") from exc
    except ValueError as exc:
        raise OtelBridgeError(f"view: {path} is not JSON: {exc}") from exc


def _graph(path: Path) -> dict[str, Any]:
    doc = _read_json(path)
    try:
        validate_document(doc)
    except Exception as exc:
        raise OtelBridgeError(f"view: {path} is not a valid graph.json: {exc}") from exc
    result: dict[str, Any] = doc
    return result


def _optional(path: Path, fmt: str) -> dict[str, Any] | None:
    if not path.is_file():
        return None
    doc = _read_json(path)
    if isinstance(doc, dict) and doc.get("format", fmt) == fmt:
        return doc
    return None


def load_bundle(path: str | os.PathLike[str], trace_links: list[TraceLink] | None = None) -> Bundle:
    """The bundle for ``path`` (a run directory or one JSON document)."""
    p = Path(path)
    links = list(trace_links or [])
    if p.is_dir():
        graph_path = p / GRAPH_FILE
        if not graph_path.is_file():
            # the directory `compare -o DIR` or `review -o DIR` wrote: its one document
            for name in (COMPARE_FILE, REVIEW_FILE):
                if (p / name).is_file():
                    return load_bundle(p / name, links)
            raise OtelBridgeError(
                f"view: {p} has no {GRAPH_FILE}, {REVIEW_FILE} or {COMPARE_FILE} (a run "
                "directory, or what compare or review wrote)"
            )
        summary = _optional(p / SUMMARY_FILE, "")
        return Bundle(
            source=str(p),
            graph=_graph(graph_path),
            review=_optional(p / REVIEW_FILE, REVIEW_FORMAT),
            summary=summary,
            trace_links=links,
        )
    doc = _read_json(p)
    fmt = doc.get("format") if isinstance(doc, dict) else None
    if fmt == GRAPH_FORMAT:
        return Bundle(source=str(p), graph=_graph(p), trace_links=links)
    if fmt == REVIEW_FORMAT:
        sibling = p.parent / GRAPH_FILE
        graph = _graph(sibling) if sibling.is_file() else None
        return Bundle(source=str(p), graph=graph, review=doc, trace_links=links)
    if fmt == COMPARE_FORMAT:
        return Bundle(source=str(p), compare=doc, trace_links=links)
    raise OtelBridgeError(
        f"view: {p} is neither a run directory nor a graph.json, review.json or compare.json"
    )
