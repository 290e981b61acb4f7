"""The review at the end of ``otel-bridge observe`` (skipped with ``--no-review``).

``observe --review-transcript FILE`` and ``--review-model URL`` give it the inputs ``review
--transcript`` and ``review --model`` take (``docs/review.md``).
"""

from __future__ import annotations

import logging
import sys
from dataclasses import dataclass
from typing import TextIO

from otel_bridge.errors import OtelBridgeError
from otel_bridge.review.build import write_review
from otel_bridge.review.render import summary_lines

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class ReviewInputs:
    """What ``observe`` passes to its review beyond the run directory."""

    transcripts: tuple[str, ...] = ()
    """Codex session transcripts (rollout JSONL) read with the run's streams."""
    model: str | None = None
    """An OpenAI-compatible base URL asked for proposals (model assistance), or None (off); the
    model name and timeout are ``review``'s defaults."""


def review_at_end(
    run_dir: str,
    out: TextIO = sys.stdout,
    inputs: ReviewInputs | None = None,
    *,
    brief: bool = False,
) -> bool:
    """Review a finished run directory before its manifest is written; print the claim summary
    (``brief``: :func:`~otel_bridge.review.render.summary_lines`'s short form).

    A failing review (or model pass) never fails the run it reviews: the run directory is
    complete without it. Returns True when the review was written.
    """
    inputs = inputs or ReviewInputs()
    try:
        doc = write_review(run_dir, None, inputs.transcripts)
    except (OtelBridgeError, OSError, ValueError) as exc:
        print(f"otel-bridge: review skipped: {exc}", file=sys.stderr)
        log.debug("review of %s failed", run_dir, exc_info=True)
        return False
    if doc["sessions"]:
        for line in summary_lines(doc, brief=brief):
            print(line, file=out)
    if inputs.model:
        _assist(run_dir, doc, inputs, out)
    return True


def _assist(run_dir: str, doc: dict[str, object], inputs: ReviewInputs, out: TextIO) -> None:
    from otel_bridge.assist import ModelConfig  # noqa: PLC0415 (only with --review-model)
    from otel_bridge.review.assist import ASSIST_JSON, write_assist  # noqa: PLC0415

    config = ModelConfig(inputs.model or "")
    try:
        result = write_assist(run_dir, doc, config)
    except (OtelBridgeError, OSError, ValueError) as exc:
        print(f"otel-bridge: review: model assistance skipped: {exc}", file=sys.stderr)
        return
    if result["status"] == "error":
        print(f"otel-bridge: review: model assistance failed: {result['error']}", file=sys.stderr)
    print(
        f"review model {config.method}: {len(result['edges'])} supports, "
        f"{len(result['splits'])} splits accepted, {len(result['rejected'])} rejected -> "
        f"{ASSIST_JSON}",
        file=out,
    )
