"""Ready configurations, installed as otel_bridge.configs (configs/local.yaml is the embedded default)."""
