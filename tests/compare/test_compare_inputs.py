"""What compare reads from spans: arguments and results, tokens, cost, the score."""

from __future__ import annotations

from otel_bridge.compare.inputs import span_metrics, tool_io_from_spans
from otel_bridge.model import LogRecord, Resource, Scope, Span, SpanEvent, Status, StatusCode

TRACE = bytes(range(16))


def span(n: int, attributes: dict[str, object], **extra: object) -> Span:
    return Span(
        resource=Resource(attributes={"service.name": "agent"}),
        scope=Scope(name="test"),
        trace_id=TRACE,
        span_id=n.to_bytes(8, "big"),
        start_time_unix_nano=n * 1000,
        end_time_unix_nano=n * 1000 + 500,
        attributes=attributes,  # type: ignore[arg-type]
        **extra,  # type: ignore[arg-type]
    )


def test_arguments_and_results_from_genai_or_openinference_attributes() -> None:
    spans = [
        span(1, {"gen_ai.tool.call.arguments": '{"a": 1}', "gen_ai.tool.call.result": "plain"}),
        span(
            2,
            {"input.value": '{"q": "x"}', "output.value": "[1, 2]"},
            status=Status(code=StatusCode.ERROR),
        ),
        span(3, {"gen_ai.operation.name": "chat"}),
    ]
    io = tool_io_from_spans(spans)
    assert set(io) == {(TRACE.hex(), f"{1:016x}"), (TRACE.hex(), f"{2:016x}")}
    first = io[(TRACE.hex(), f"{1:016x}")]
    assert first.arguments == {"a": 1}
    assert first.result == "plain"
    assert not first.error
    second = io[(TRACE.hex(), f"{2:016x}")]
    assert second.arguments == {"q": "x"}
    assert second.result == [1, 2]
    assert second.error


def test_tokens_from_model_spans_only_cost_when_stated_latest_score_wins() -> None:
    spans = [
        span(
            1,
            {
                "gen_ai.operation.name": "chat",
                "gen_ai.usage.input_tokens": 100,
                "gen_ai.usage.output_tokens": 20,
                "gen_ai.usage.cost": 0.5,
            },
        ),
        span(2, {"gen_ai.operation.name": "chat", "gen_ai.usage.input_tokens": 50}),
        # an agent span repeating its children's totals is not counted again
        span(
            3,
            {"gen_ai.operation.name": "invoke_agent", "gen_ai.usage.input_tokens": 150},
            events=(
                SpanEvent(
                    time_unix_nano=3200,
                    name="gen_ai.evaluation.result",
                    attributes={"gen_ai.evaluation.score.value": 0.4},
                ),
            ),
        ),
    ]
    log = LogRecord(
        resource=Resource(),
        scope=Scope(),
        time_unix_nano=9000,
        event_name="gen_ai.evaluation.result",
        attributes={"gen_ai.evaluation.score.value": 0.9},
    )
    metrics = span_metrics(spans, [log])
    assert metrics["tokens"] == {"input": 150, "output": 20}
    assert metrics["cost"] == 0.5
    assert metrics["score"] == 0.9
    assert metrics["latency_ms"] == 0.0005  # the invoke_agent span: 500 ns


def test_nothing_stated_stays_unknown() -> None:
    metrics = span_metrics([span(1, {"gen_ai.operation.name": "chat"})], [])
    assert metrics == {
        "score": None,
        "tokens": {"input": None, "output": None},
        "cost": None,
        "latency_ms": None,
    }
