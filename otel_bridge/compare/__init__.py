"""Multi-run comparison (``otel-bridge compare``): coverage, impact, provenance, joined graph.

``docs/compare.md`` is the contract. :func:`load_run` reads one run directory, :func:`compare`
builds the ``compare.json`` document, :func:`render_markdown` its ``compare.md``.
"""

from __future__ import annotations

from .inputs import RunData, ToolIO, extract_run, load_run, load_traces
from .report import CompareConfig, compare, render_markdown, schema, validate_document

__all__ = [
    "CompareConfig",
    "RunData",
    "ToolIO",
    "compare",
    "extract_run",
    "load_run",
    "load_traces",
    "render_markdown",
    "schema",
    "validate_document",
]
