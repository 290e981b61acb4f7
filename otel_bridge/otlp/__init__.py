"""otlp subpackage."""
