"""OTLP codecs: typed spans and log records <-> OTLP protobuf messages and OTLP/JSON.

* :mod:`otel_bridge.otlp.proto_codec`: ``ExportTraceServiceRequest`` /
  ``ExportLogsServiceRequest`` in both directions, rejecting invalid records one by one;
* :mod:`otel_bridge.otlp.json_codec`: OTLP/JSON written by hand from the specification (hex
  ids, int64 strings, integer enums), with decode errors that name the exact field path, and
  single-record encoders (``span_to_dict``, ``log_to_dict``) for JSON-lines files.
"""
