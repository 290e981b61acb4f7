"""Tests of the web viewer (otel_bridge/viewer)."""
