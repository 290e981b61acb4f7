"""Receivers: components that bring telemetry into a pipeline.

Installed as ``otel_bridge.receivers``.
"""
