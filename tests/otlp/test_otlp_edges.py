"""Edge cases of the OTLP/HTTP receiver on raw sockets, body decoding and the exporter's sender."""

from __future__ import annotations

import gzip
import json
import socket
import threading
import time
import zlib
from collections.abc import Callable

import pytest
from google.rpc import status_pb2  # type: ignore[import-untyped]
from hypothesis import given, settings
from hypothesis import strategies as st
from otlp_fixtures import Running, StartReceiver, make_span
from waiting import wait_until

from otel_bridge.errors import DecodeError, PayloadTooLargeError
from otel_bridge.exporters.otlp.config import QueueConfig, RetryConfig
from otel_bridge.exporters.otlp.sender import Backoff, Item, Sender, SendResult
from otel_bridge.otlp import json_codec
from otel_bridge.receivers.otlp.http_server import read_limited
from otel_bridge.testing import RecordingConsumer

Response = tuple[int, dict[str, str], bytes]


def raw_request(running: Running, head: str, body: bytes = b"") -> Response:
    """Send ``head`` (request line and headers, CRLF-separated) and ``body``; parse the answer."""
    port = running.receiver.http_port
    assert port is not None
    with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
        sock.sendall(head.encode("latin-1") + b"\r\n\r\n" + body)
        data = b""
        while b"\r\n\r\n" not in data:
            chunk = sock.recv(65536)
            if not chunk:
                break
            data += chunk
        header_blob, _, rest = data.partition(b"\r\n\r\n")
        lines = header_blob.decode("latin-1").split("\r\n")
        status = int(lines[0].split()[1])
        headers = {}
        for line in lines[1:]:
            name, _, value = line.partition(":")
            headers[name.strip().lower()] = value.strip()
        length = int(headers.get("content-length", "0"))
        while len(rest) < length:
            chunk = sock.recv(65536)
            if not chunk:
                break
            rest += chunk
    return status, headers, rest[:length]


def trace_json(n: int = 1) -> bytes:
    """An OTLP/JSON trace request with ``n`` valid spans."""
    return json.dumps(json_codec.encode_traces([make_span(i + 1) for i in range(n)])).encode()


def rpc_status(headers: dict[str, str], body: bytes) -> tuple[int, str]:
    """The ``google.rpc.Status`` code and message of an error answer, JSON or protobuf."""
    if headers["content-type"] == "application/json":
        parsed = json.loads(body)
        return int(parsed["code"]), str(parsed["message"])
    status = status_pb2.Status.FromString(body)
    return int(status.code), str(status.message)


def test_missing_content_length_is_411_and_closes(start_receiver: StartReceiver) -> None:
    """A POST with neither Content-Length nor chunked encoding gets 411 and a closed connection."""
    running = start_receiver(grpc=False)
    status, headers, body = raw_request(
        running, "POST /v1/traces HTTP/1.1\r\nHost: x\r\nContent-Type: application/json"
    )
    assert status == 411
    assert headers["connection"] == "close"
    assert rpc_status(headers, body) == (3, "Content-Length is required")
    assert running.sink.spans == []


def test_non_numeric_content_length_is_400(start_receiver: StartReceiver) -> None:
    """A Content-Length that is not a number is a 400 naming the bad value."""
    running = start_receiver(grpc=False)
    status, headers, body = raw_request(
        running,
        "POST /v1/traces HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        "Content-Length: -5",
    )
    assert status == 400
    code, message = rpc_status(headers, body)
    assert code == 3
    assert "'-5'" in message


def test_chunked_body_is_accepted(start_receiver: StartReceiver) -> None:
    """A chunked JSON body split in several chunks (with extensions) is decoded and delivered."""
    running = start_receiver(grpc=False)
    payload = trace_json(2)
    half = len(payload) // 2
    chunks = (
        f"{half:x};ext=1\r\n".encode()
        + payload[:half]
        + b"\r\n"
        + f"{len(payload) - half:x}\r\n".encode()
        + payload[half:]
        + b"\r\n0\r\nTrailer: t\r\n\r\n"
    )
    status, headers, body = raw_request(
        running,
        "POST /v1/traces HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        "Transfer-Encoding: chunked",
        chunks,
    )
    assert (status, body) == (200, b"{}")
    assert headers["content-type"] == "application/json"
    assert [s.name for s in running.sink.spans] == ["span-1", "span-2"]


def test_chunked_body_over_limit_is_413(start_receiver: StartReceiver) -> None:
    """A chunked body whose chunks add up past the limit is refused with 413 and counted."""
    running = start_receiver(grpc=False, max_request_body_size=100)
    chunk = b"x" * 80
    body = b"50\r\n" + chunk + b"\r\n50\r\n" + chunk + b"\r\n0\r\n\r\n"
    status, headers, answer = raw_request(
        running,
        "POST /v1/logs HTTP/1.1\r\nHost: x\r\nContent-Type: application/x-protobuf\r\n"
        "Transfer-Encoding: chunked",
        body,
    )
    assert status == 413
    assert rpc_status(headers, answer)[0] == 8
    assert running.counter("requests_too_large") == 1


def test_malformed_chunk_size_is_400(start_receiver: StartReceiver) -> None:
    """A chunk size line that is not hex is a 400 malformed chunked body."""
    running = start_receiver(grpc=False)
    status, headers, body = raw_request(
        running,
        "POST /v1/traces HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        "Transfer-Encoding: chunked",
        b"zz\r\nabc\r\n0\r\n\r\n",
    )
    assert status == 400
    assert rpc_status(headers, body) == (3, "malformed chunked body")


@pytest.mark.parametrize("encoding", ["br", "zstd", "compress"])
def test_unsupported_content_encoding_is_415(start_receiver: StartReceiver, encoding: str) -> None:
    """A Content-Encoding other than gzip/deflate/identity is a 415 naming the encoding."""
    running = start_receiver(grpc=False)
    payload = trace_json()
    status, headers, body = raw_request(
        running,
        f"POST /v1/traces HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        f"Content-Encoding: {encoding}\r\nContent-Length: {len(payload)}",
        payload,
    )
    assert status == 415
    assert repr(encoding) in rpc_status(headers, body)[1]
    assert running.sink.spans == []


@pytest.mark.parametrize(
    ("encoding", "compress"),
    [
        ("x-gzip", gzip.compress),
        ("GZIP", gzip.compress),
        ("identity", lambda b: b),
        ("none", lambda b: b),
        ("deflate", lambda b: zlib.compress(b)[2:-4]),  # raw deflate, no zlib header
        ("gzip", lambda b: gzip.compress(b[:10]) + gzip.compress(b[10:])),  # two members
    ],
)
def test_content_encoding_variants_are_decoded(
    start_receiver: StartReceiver, encoding: str, compress: Callable[[bytes], bytes]
) -> None:
    """x-gzip, case-insensitive names, identity, raw deflate and multi-member gzip all decode."""
    running = start_receiver(grpc=False)
    payload = compress(trace_json())
    status, _, body = raw_request(
        running,
        f"POST /v1/traces HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        f"Content-Encoding: {encoding}\r\nContent-Length: {len(payload)}",
        payload,
    )
    assert (status, body) == (200, b"{}")
    assert [s.name for s in running.sink.spans] == ["span-1"]


def test_corrupt_gzip_is_400_and_counted(start_receiver: StartReceiver) -> None:
    """A body announced as gzip but not gzip is a 400 and counts as malformed."""
    running = start_receiver(grpc=False)
    payload = b"this is not gzip at all"
    status, headers, body = raw_request(
        running,
        f"POST /v1/traces HTTP/1.1\r\nHost: x\r\nContent-Type: application/x-protobuf\r\n"
        f"Content-Encoding: gzip\r\nContent-Length: {len(payload)}",
        payload,
    )
    assert status == 400
    assert headers["content-type"] == "application/x-protobuf"
    assert "gzip" in rpc_status(headers, body)[1]
    assert running.counter("requests_malformed") == 1


def test_content_type_parameters_and_case_are_ignored(start_receiver: StartReceiver) -> None:
    """``Application/JSON; charset=utf-8`` is JSON and the answer is JSON."""
    running = start_receiver(grpc=False)
    payload = trace_json()
    status, headers, body = raw_request(
        running,
        f"POST /v1/traces?x=1 HTTP/1.1\r\nHost: x\r\nContent-Type: Application/JSON; charset=utf-8"
        f"\r\nContent-Length: {len(payload)}",
        payload,
    )
    assert (status, body) == (200, b"{}")
    assert headers["content-type"] == "application/json"
    assert len(running.sink.spans) == 1


def test_missing_content_type_is_415(start_receiver: StartReceiver) -> None:
    """A POST without Content-Type is a 415 that says none was given."""
    running = start_receiver(grpc=False)
    status, headers, body = raw_request(
        running, "POST /v1/logs HTTP/1.1\r\nHost: x\r\nContent-Length: 2", b"{}"
    )
    assert status == 415
    assert "(none)" in rpc_status(headers, body)[1]


@pytest.mark.parametrize("method", ["PUT", "DELETE", "PATCH", "OPTIONS"])
def test_other_methods_on_signal_paths_are_405_with_allow(
    start_receiver: StartReceiver, method: str
) -> None:
    """Every non-POST method on /v1/logs is 405 with ``Allow: POST``."""
    running = start_receiver(grpc=False)
    status, headers, body = raw_request(
        running, f"{method} /v1/logs HTTP/1.1\r\nHost: x\r\nContent-Length: 0"
    )
    assert status == 405
    assert headers["allow"] == "POST"
    assert rpc_status(headers, body)[1] == f"{method} is not allowed; use POST"


def test_post_to_metrics_path_is_404(start_receiver: StartReceiver) -> None:
    """``/v1/metrics`` is not served: 404 saying metrics are not recorded, and counted."""
    running = start_receiver(grpc=False)
    status, headers, body = raw_request(
        running,
        "POST /v1/metrics HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        "Content-Length: 2",
        b"{}",
    )
    assert status == 404
    code, message = rpc_status(headers, body)
    assert code == 5
    assert "records traces and logs, not metrics" in message
    assert "OTEL_METRICS_EXPORTER=none" in message
    assert running.counter("metrics_requests_unsupported") == 1


def test_json_partial_success_counts_are_strings(start_receiver: StartReceiver) -> None:
    """A JSON partial success carries ``rejectedSpans`` as an int64 string plus a message."""
    running = start_receiver(grpc=False)
    request = json_codec.encode_traces([make_span(1), make_span(2)])
    spans = request["resourceSpans"][0]["scopeSpans"][0]["spans"]
    spans[1]["traceId"] = "0" * 32  # all-zero trace id: invalid
    payload = json.dumps(request).encode()
    status, _, body = raw_request(
        running,
        f"POST /v1/traces HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(payload)}",
        payload,
    )
    assert status == 200
    partial = json.loads(body)["partialSuccess"]
    assert partial["rejectedSpans"] == "1"
    assert partial["errorMessage"]
    assert [s.name for s in running.sink.spans] == ["span-1"]


def test_consumer_crash_is_permanent_400_and_server_keeps_serving(
    start_receiver: StartReceiver,
) -> None:
    """A downstream exception that is not a refusal is a permanent 400 (no Retry-After) with a
    message saying what was wrong; counted as rejected; later requests are still served."""
    running = start_receiver(
        grpc=False, sink=RecordingConsumer(error=ValueError("bug")), retry_after=2.5
    )
    payload = trace_json()
    head = (
        "POST /v1/traces HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(payload)}"
    )
    first = raw_request(running, head, payload)
    second = raw_request(running, head, payload)
    assert first[0] == 400
    assert second[0] == 400
    assert "retry-after" not in first[1]
    code, message = rpc_status(first[1], first[2])
    assert code == 3  # INVALID_ARGUMENT
    assert "ValueError" in message
    assert "bug" in message
    assert running.counter("spans_rejected") == 2
    assert running.counter("spans_refused") == 0


# --- read_limited: decoding of bodies ---------------------------------------------------------

_ENCODERS: dict[str, Callable[[bytes], bytes]] = {
    "": lambda b: b,
    "gzip": gzip.compress,
    "deflate": zlib.compress,
}


@settings(max_examples=60, deadline=None)
@given(data=st.binary(max_size=4096), encoding=st.sampled_from(sorted(_ENCODERS)))
def test_read_limited_round_trips_within_limit(data: bytes, encoding: str) -> None:
    """Any body at most the limit decodes back to itself under every supported encoding."""
    raw = _ENCODERS[encoding](data)
    assert read_limited(lambda n: raw[:n], len(raw), encoding, len(data)) == data


@settings(max_examples=60, deadline=None)
@given(data=st.binary(min_size=1, max_size=4096), encoding=st.sampled_from(["gzip", "deflate"]))
def test_read_limited_refuses_one_byte_over_limit(data: bytes, encoding: str) -> None:
    """A decompressed body one byte longer than the limit is refused, never returned."""
    raw = _ENCODERS[encoding](data)
    with pytest.raises(PayloadTooLargeError):
        read_limited(lambda n: raw[:n], len(raw), encoding, len(data) - 1)


def test_read_limited_short_body_is_decode_error() -> None:
    """A body shorter than its Content-Length is a DecodeError giving both sizes."""
    with pytest.raises(DecodeError, match="after 3 of 10 bytes"):
        read_limited(lambda n: b"abc", 10, "", 100)


def test_read_limited_truncated_gzip_is_decode_error() -> None:
    """A gzip stream cut short is reported as truncated, not silently accepted."""
    raw = gzip.compress(b"hello world" * 100)[:-12]
    with pytest.raises(DecodeError, match="truncated"):
        read_limited(lambda n: raw[:n], len(raw), "gzip", 10_000)


def test_read_limited_bomb_stops_at_limit() -> None:
    """A 50 MB gzip bomb is refused once past a 1 kB limit, without inflating it all."""
    raw = gzip.compress(b"\0" * (50 * 1024 * 1024))
    started = time.monotonic()
    with pytest.raises(PayloadTooLargeError):
        read_limited(lambda n: raw[:n], len(raw), "gzip", 1024)
    assert time.monotonic() - started < 0.5


# --- Sender: queue, retry, backoff, shutdown --------------------------------------------------


def fast_retry(**overrides: float | bool) -> RetryConfig:
    """A retry config with millisecond intervals for tests."""
    fields: dict[str, float | bool] = {
        "initial_interval": 0.001,
        "max_interval": 0.005,
        "max_elapsed_time": 1.0,
        "randomization_factor": 0.0,
    }
    fields.update(overrides)
    return RetryConfig(**fields)  # type: ignore[arg-type]


ITEM = Item("traces", (make_span(1),))


class Script:
    """An ``attempt`` callable that answers from a list and records when it was called."""

    def __init__(self, *results: SendResult | Exception) -> None:
        self.results = list(results)
        self.times: list[float] = []
        self.lock = threading.Lock()

    def __call__(self, item: Item) -> SendResult:
        with self.lock:
            self.times.append(time.monotonic())
            result = self.results.pop(0) if len(self.results) > 1 else self.results[0]
        if isinstance(result, Exception):
            raise result
        return result


def make_sender(
    script: Script, retry: RetryConfig, queue: QueueConfig | None = None
) -> tuple[Sender, list[tuple[Item, SendResult]]]:
    """A sender over ``script`` and the list its ``on_done`` fills."""
    done: list[tuple[Item, SendResult]] = []
    sender = Sender(
        script, retry, queue or QueueConfig(enabled=False), lambda i, r: done.append((i, r))
    )
    return sender, done


def test_retry_after_from_server_overrides_backoff() -> None:
    """A retryable failure with retry_after waits that long, not the (shorter) backoff delay."""
    script = Script(SendResult(ok=False, retryable=True, retry_after=0.2), SendResult(ok=True))
    sender, done = make_sender(script, fast_retry())
    result = sender.send(ITEM)
    assert result.ok
    assert len(script.times) == 2
    assert script.times[1] - script.times[0] >= 0.19
    assert done == [(ITEM, result)]


def test_non_retryable_failure_is_attempted_once() -> None:
    """A permanent failure is returned after one attempt."""
    script = Script(SendResult(ok=False, retryable=False, message="bad request"))
    sender, done = make_sender(script, fast_retry())
    result = sender.send(ITEM)
    assert (result.ok, result.message, len(script.times)) == (False, "bad request", 1)
    assert done[0][1] is result


def test_retry_disabled_attempts_once() -> None:
    """With retry_on_failure disabled a retryable failure is final after one attempt."""
    script = Script(SendResult(ok=False, retryable=True, message="busy"))
    sender, _ = make_sender(script, fast_retry(enabled=False))
    assert not sender.send(ITEM).ok
    assert len(script.times) == 1


def test_gives_up_when_retry_after_passes_max_elapsed_time() -> None:
    """A server delay beyond max_elapsed_time ends retries at once instead of sleeping."""
    script = Script(SendResult(ok=False, retryable=True, retry_after=30.0, message="503"))
    sender, _ = make_sender(script, fast_retry(max_elapsed_time=0.5))
    started = time.monotonic()
    result = sender.send(ITEM)
    assert time.monotonic() - started < 0.5
    assert not result.ok
    assert "gave up after 0.5s" in result.message
    assert "503" in result.message


def test_transport_exception_is_a_failed_result_not_a_crash() -> None:
    """An exception from the transport becomes a non-retryable failed result naming it."""
    script = Script(RuntimeError("socket exploded"))
    sender, done = make_sender(script, fast_retry())
    result = sender.send(ITEM)
    assert not result.ok
    assert "socket exploded" in result.message
    assert len(done) == 1


def test_retries_until_success() -> None:
    """Several retryable failures are retried until the first success."""
    fail = SendResult(ok=False, retryable=True)
    script = Script(fail, fail, fail, SendResult(ok=True))
    sender, _ = make_sender(script, fast_retry())
    assert sender.send(ITEM).ok
    assert len(script.times) == 4


def test_full_queue_refuses_and_shutdown_returns_unsent() -> None:
    """Submits past queue_size are refused; shutdown hands back what was never sent."""
    gate = threading.Event()

    def blocked(item: Item) -> SendResult:
        gate.wait(2.0)
        return SendResult(ok=False, retryable=True)

    done: list[tuple[Item, SendResult]] = []
    sender = Sender(
        blocked,
        fast_retry(max_elapsed_time=10.0),
        QueueConfig(enabled=True, queue_size=2, num_consumers=1),
        lambda i, r: done.append((i, r)),
    )
    sender.start()
    assert sender.submit(ITEM)
    wait_until(lambda: not sender.pending(), 2, "the consumer to take the first item")
    assert sender.submit(ITEM)
    assert sender.submit(ITEM)
    assert not sender.submit(ITEM)
    started = time.monotonic()
    gate.set()
    left = sender.shutdown(0.2)
    assert time.monotonic() - started < 2.0
    assert len(left) + len(done) == 3
    assert all(not r.ok for _, r in done)
    assert not sender.submit(ITEM)


def test_shutdown_drains_queue_within_deadline() -> None:
    """Items queued before shutdown are all sent when the transport is healthy."""
    script = Script(SendResult(ok=True))
    done: list[tuple[Item, SendResult]] = []
    sender = Sender(
        script,
        fast_retry(),
        QueueConfig(enabled=True, queue_size=100, num_consumers=2),
        lambda i, r: done.append((i, r)),
    )
    sender.start()
    for _ in range(50):
        assert sender.submit(ITEM)
    assert sender.shutdown(2.0) == []
    assert len(done) == 50
    assert all(r.ok for _, r in done)


def test_shutdown_interrupts_backoff_wait() -> None:
    """An item waiting out a long Retry-After ends as failed as soon as the deadline passes."""
    script = Script(SendResult(ok=False, retryable=True, retry_after=5.0, message="busy"))
    done: list[tuple[Item, SendResult]] = []
    sender = Sender(
        script,
        fast_retry(max_elapsed_time=60.0),
        QueueConfig(enabled=True, queue_size=10, num_consumers=1),
        lambda i, r: done.append((i, r)),
    )
    sender.start()
    sender.submit(ITEM)
    wait_until(lambda: script.times, 5, "the first send attempt")
    started = time.monotonic()
    assert sender.shutdown(0.1) == []
    assert time.monotonic() - started < 1.5
    assert len(done) == 1
    assert "shut down while retrying" in done[0][1].message


@settings(max_examples=50, deadline=None)
@given(
    initial=st.floats(0.01, 5.0),
    multiplier=st.floats(1.0, 3.0),
    factor=st.floats(0.0, 0.9),
    cap=st.floats(0.01, 30.0),
)
def test_backoff_delays_stay_within_jitter_of_capped_interval(
    initial: float, multiplier: float, factor: float, cap: float
) -> None:
    """Each delay lies within ±factor of the current interval, which never exceeds the cap."""
    config = RetryConfig(
        initial_interval=initial,
        max_interval=cap,
        multiplier=multiplier,
        randomization_factor=factor,
    )
    backoff = Backoff(config)
    interval = initial
    for _ in range(12):
        delay = backoff.next_delay()
        assert interval * (1 - factor) - 1e-9 <= delay <= interval * (1 + factor) + 1e-9
        interval = min(interval * multiplier, cap)
