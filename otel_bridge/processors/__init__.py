"""Processors: components that transform batches (installed as otel_bridge.processors)."""
