"""A recording OTLP/gRPC trace receiver: stands in for Jaeger, which cannot be installed here.

It implements OpenTelemetry's ``TraceService`` with grpcio and keeps every
``ExportTraceServiceRequest`` it receives, so a test can assert on exactly what an exporter sent.
"""

from __future__ import annotations

import gzip
import threading
from collections.abc import Iterator
from concurrent import futures
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import grpc
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2, trace_service_pb2_grpc
from opentelemetry.proto.trace.v1 import trace_pb2
from waiting import poll


class _Service(trace_service_pb2_grpc.TraceServiceServicer):
    def __init__(self, recorder: RecordingTraceServer) -> None:
        self._recorder = recorder

    def Export(  # noqa: N802 - the generated service's method name
        self,
        request: trace_service_pb2.ExportTraceServiceRequest,
        context: grpc.ServicerContext,
    ) -> trace_service_pb2.ExportTraceServiceResponse:
        self._recorder.record(request)
        return trace_service_pb2.ExportTraceServiceResponse()


class _Recorder:
    """Keeps export requests, thread-safe; both servers below record through it."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._requests: list[trace_service_pb2.ExportTraceServiceRequest] = []

    def record(self, request: trace_service_pb2.ExportTraceServiceRequest) -> None:
        """Keep a copy of one request (called from the server's threads)."""
        copy = trace_service_pb2.ExportTraceServiceRequest()
        copy.CopyFrom(request)
        with self._lock:
            self._requests.append(copy)

    @property
    def requests(self) -> list[trace_service_pb2.ExportTraceServiceRequest]:
        """Every request received so far."""
        with self._lock:
            return list(self._requests)

    def spans(self) -> Iterator[tuple[dict[str, object], trace_pb2.Span]]:
        """Every received span with its resource attributes (as plain values)."""
        for request in self.requests:
            for resource_spans in request.resource_spans:
                resource = attributes(resource_spans.resource.attributes)
                for scope_spans in resource_spans.scope_spans:
                    for span in scope_spans.spans:
                        yield resource, span

    def span_named(self, name: str) -> list[tuple[dict[str, object], trace_pb2.Span]]:
        """Every received span called ``name``, with its resource attributes."""
        return [(r, s) for r, s in self.spans() if s.name == name]

    def wait_for(self, predicate: object, timeout: float = 10.0) -> bool:
        """Poll until ``predicate(self)`` is true or ``timeout`` passes; whether it holds."""
        assert callable(predicate)
        return bool(poll(lambda: bool(predicate(self)), bool, timeout))


class RecordingTraceServer(_Recorder):
    """An OTLP/gRPC trace server on 127.0.0.1 that records every export request."""

    def __init__(self) -> None:
        super().__init__()
        self._server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
        trace_service_pb2_grpc.add_TraceServiceServicer_to_server(  # type: ignore[no-untyped-call]
            _Service(self), self._server
        )
        self.port = self._server.add_insecure_port("127.0.0.1:0")

    def start(self) -> RecordingTraceServer:
        """Start serving; returns self."""
        self._server.start()
        return self

    def stop(self) -> None:
        """Stop at once."""
        self._server.stop(grace=None).wait()


class _HttpHandler(BaseHTTPRequestHandler):
    server: _RecordingHttpServer

    def log_message(self, format: str, *args: object) -> None:
        """Quiet."""

    def do_POST(self) -> None:
        """``POST /v1/traces`` with a protobuf body (gzip or not)."""
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        if self.headers.get("Content-Encoding") == "gzip":
            body = gzip.decompress(body)
        if self.path != "/v1/traces" or "protobuf" not in (self.headers.get("Content-Type") or ""):
            self.send_response(404 if self.path != "/v1/traces" else 415)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        request = trace_service_pb2.ExportTraceServiceRequest()
        request.ParseFromString(body)
        self.server.recorder.record(request)
        payload = trace_service_pb2.ExportTraceServiceResponse().SerializeToString()
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)


class _RecordingHttpServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, recorder: _Recorder) -> None:
        super().__init__(("127.0.0.1", 0), _HttpHandler)
        self.recorder = recorder


class RecordingHttpTraceServer(_Recorder):
    """An OTLP/HTTP (protobuf) trace server on 127.0.0.1 that records every export request."""

    def __init__(self) -> None:
        super().__init__()
        self._server = _RecordingHttpServer(self)
        self.port = int(self._server.server_address[1])

    def start(self) -> RecordingHttpTraceServer:
        """Start serving on a daemon thread; returns self."""
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return self

    def stop(self) -> None:
        """Stop serving."""
        self._server.shutdown()
        self._server.server_close()


def value(any_value: object) -> object:
    """A plain Python value from an OTLP ``AnyValue``."""
    kind = any_value.WhichOneof("value")  # type: ignore[attr-defined]
    if kind is None:
        return None
    raw = getattr(any_value, kind)
    if kind == "array_value":
        return [value(v) for v in raw.values]
    if kind == "kvlist_value":
        return attributes(raw.values)
    return raw


def attributes(key_values: object) -> dict[str, object]:
    """A dict from a repeated OTLP ``KeyValue``."""
    return {kv.key: value(kv.value) for kv in key_values}  # type: ignore[attr-defined]
