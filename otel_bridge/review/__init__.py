"""The claim-to-evidence review layer (LEDGER's layered graph, built deterministically).

``write_review(run_dir)`` reads a run directory's ``graph.json`` and streams and writes
``review.json`` (schema: ``otel_bridge/schemas/review.schema.json``), ``review.md`` and
``review-records.jsonl``. ``docs/review.md`` is the contract.
"""

from __future__ import annotations

from otel_bridge.review.build import (
    FORMAT,
    RECORDS,
    REVIEW_JSON,
    REVIEW_MD,
    VERSION,
    build_review,
    schema,
    validate_review,
    write_review,
)
from otel_bridge.review.render import render_markdown, summary_lines

__all__ = [
    "FORMAT",
    "RECORDS",
    "REVIEW_JSON",
    "REVIEW_MD",
    "VERSION",
    "build_review",
    "render_markdown",
    "schema",
    "summary_lines",
    "validate_review",
    "write_review",
]
