"""The web viewer: one page that shows a run's evidence graph, timeline, review and comparison.

``otel-bridge view PATH`` serves the page on 127.0.0.1 (:mod:`.server`) or writes it as one
self-contained HTML file (:func:`.page.render`); ``observe --view`` serves it live
(:mod:`.live`). What the page reads is a :class:`.data.Bundle`; ``docs/viewer.md`` is the contract.
"""

from otel_bridge.viewer import columns
from otel_bridge.viewer.data import Bundle, TraceLink, load_bundle
from otel_bridge.viewer.page import render

__all__ = ["Bundle", "TraceLink", "columns", "load_bundle", "render"]
