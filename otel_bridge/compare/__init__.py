"""Multi-run comparison (``otel-bridge compare``): coverage, impact, provenance, joined graph.

``docs/compare.md`` is the contract. :func:`load_run` reads one run directory, :func:`compare`
builds the ``compare.json`` document, :func:`render_markdown` its ``compare.md``.
"""

from __future__ import annotations

from .compact import materialized, outline
from .inputs import RunData, ToolIO, extract_run, load_run, load_traces
from .output import ProvenanceSpool, validate_provenance, write_document
from .report import (
    PROVENANCE_MODES,
    CompareConfig,
    Comparison,
    compare,
    provenance_summary,
    render_markdown,
    schema,
    validate_document,
)

__all__ = [
    "PROVENANCE_MODES",
    "CompareConfig",
    "Comparison",
    "ProvenanceSpool",
    "RunData",
    "ToolIO",
    "compare",
    "extract_run",
    "load_run",
    "load_traces",
    "materialized",
    "outline",
    "provenance_summary",
    "render_markdown",
    "schema",
    "validate_document",
    "validate_provenance",
    "write_document",
]
