"""Suite-wide settings.

Hypothesis: no per-example deadline and no "input generation is slow" health check. Both measure
wall time, which a shared, loaded machine stretches without anything being wrong; the properties
themselves and their example counts are unchanged.
"""

from __future__ import annotations

from hypothesis import HealthCheck, settings

settings.register_profile(
    "otel-bridge",
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.load_profile("otel-bridge")
