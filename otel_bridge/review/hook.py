"""The review at the end of ``otel-bridge observe`` (skipped with ``--no-review``)."""

from __future__ import annotations

import logging
import sys
from typing import TextIO

from otel_bridge.errors import OtelBridgeError
from otel_bridge.review.build import write_review
from otel_bridge.review.render import summary_lines

log = logging.getLogger(__name__)


def review_at_end(run_dir: str, out: TextIO = sys.stdout) -> bool:
    """Review a finished run directory before its manifest is written; print the claim summary.

    A failing review never fails the run it reviews: the run directory is complete without it.
    Returns True when the review was written.
    """
    try:
        doc = write_review(run_dir)
    except (OtelBridgeError, OSError, ValueError) as exc:
        print(f"otel-bridge: review skipped: {exc}", file=sys.stderr)
        log.debug("review of %s failed", run_dir, exc_info=True)
        return False
    if doc["sessions"]:
        for line in summary_lines(doc):
            print(line, file=out)
    return True
