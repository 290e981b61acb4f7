"""Receivers: components that bring telemetry into a pipeline (installed as otel_bridge.receivers)."""
