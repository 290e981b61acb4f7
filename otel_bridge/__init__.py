"""otel-bridge: join agent traces with independent OS observation into one evidence graph."""

__version__ = "0.1.0"
