"""Optional model assistance for ``review`` and ``compare`` (off by default; ``--model URL``).

A model only *proposes*: claim splits and ``supports`` edges for a review, ``add``/``remove``
patch operations on a comparison's candidate edges. The code checks every proposal against the
deterministic document (ids exist, order and schema kept, nothing observed replaced or
contradicted), keeps the accepted ones as inferred ``model:<name>`` results in a separate file and
lists the rejected ones with why. Every prompt and response is stored in an owner-only audit
file. ``docs/review.md`` and ``docs/compare.md`` (*Model assistance*) are the contract.
"""

from __future__ import annotations

from otel_bridge.assist.client import (
    AssistError,
    AuditLog,
    ModelConfig,
    ask,
    parse_answer,
)

__all__ = ["AssistError", "AuditLog", "ModelConfig", "ask", "parse_answer"]
