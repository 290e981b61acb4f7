"""Ready configurations, installed as otel_bridge.configs.

``local.yaml`` is the embedded default of ``otel-bridge run``.
"""
