"""Exporters: components that write batches out (installed as otel_bridge.exporters)."""
