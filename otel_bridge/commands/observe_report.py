"""The end of ``observe``: the run directory's safety check, the OTLP health of the run in plain
words, ``report.md`` and the printed summary."""

from __future__ import annotations

import sys
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import orjson

from otel_bridge import rundir
from otel_bridge.component import EXPORTER, RECEIVER, Telemetry, UndeclaredCounterError
from otel_bridge.otlp.mux import ProtocolMux

if TYPE_CHECKING:
    from otel_bridge.pipeline import Collector

REPORT = "report.md"
"""The run report's file name in the run directory."""


_NOT_RUN = {
    126: "126, the shell's code for a command found but not executable",
    127: "127, the shell's code for a command not found",
}
"""Exit codes that usually mean CMD never ran (the gate ``exec``s it through ``sh``)."""


def otlp_summary(
    telemetry: Telemetry, mux: ProtocolMux | None, *, recorded: int, exit_code: int | None = None
) -> dict[str, Any]:
    """What the OTLP receivers got from CMD, and warnings in plain words when it was nothing
    (``exit_code``: CMD's, to say when it most likely never ran)."""

    def n(name: str) -> int:
        return telemetry.total(name, kind=RECEIVER, type="otlp")

    out: dict[str, Any] = {
        "endpoint": mux.url if mux is not None else None,
        "connections": dict(mux.connections) if mux is not None else None,
        "spans_received": n("spans_accepted"),
        "spans_recorded": recorded,
        "spans_rejected": n("spans_rejected"),
        "spans_refused": n("spans_refused"),
        "log_records_received": n("log_records_accepted"),
        "requests_malformed": n("requests_malformed"),
        "requests_too_large": n("requests_too_large"),
        "metrics_requests_refused": n("metrics_requests_unsupported"),
        "spans_refused_why": _why(telemetry, "spans_refused"),
        "requests_malformed_why": _why(telemetry, "requests_malformed"),
        "spans_rejected_why": _why(telemetry, "spans_rejected"),
    }
    out["warnings"] = _warnings(out, exit_code)
    return out


def _why(telemetry: Telemetry, counter: str) -> list[str]:
    """The reasons the receivers kept for ``counter`` (their notes), sorted."""
    return sorted(
        text
        for key, text in telemetry.notes().items()
        if key.startswith(f"{RECEIVER}.") and key.endswith(f".{counter}")
    )


def _warnings(o: Mapping[str, Any], exit_code: int | None) -> list[str]:
    warnings = []
    conns = o["connections"]
    routed = 0 if conns is None else conns["grpc"] + conns["http"]
    if not (o["spans_received"] or o["spans_rejected"] or o["spans_refused"]):
        if routed == 0 and exit_code in _NOT_RUN:
            warnings.append(
                f"the command sent no spans and exited {_NOT_RUN[exit_code]}: it most likely "
                "never ran (check the command's name, path and permissions in the message above)"
            )
        elif conns is not None and routed == 0 and exit_code not in (None, 0):
            warnings.append(
                f"the command sent no spans and exited {exit_code}: it never connected to "
                "OTEL_EXPORTER_OTLP_ENDPOINT, most likely because it failed before exporting "
                "(see its error above), else it is not instrumented with an OpenTelemetry SDK "
                "exporter or sets its exporter's endpoint in code"
            )
        elif conns is not None and routed == 0:
            warnings.append(
                "the command sent no spans: it never connected to OTEL_EXPORTER_OTLP_ENDPOINT "
                "(it is not instrumented with an OpenTelemetry SDK exporter, sets its exporter's "
                "endpoint in code, or exited before exporting)"
            )
        elif o["requests_malformed"]:
            warnings.append(
                "the command sent no spans that could be recorded: its requests to the OTLP "
                "endpoint could not be decoded (below)"
            )
        elif o["log_records_received"]:
            warnings.append(
                f"the command sent no spans, only {o['log_records_received']} log records "
                "(events, as Claude Code and Codex export them without traces): the "
                "graph has no tool call spans to link processes to exactly; the review reads the "
                "events and attributes processes by their stated times (docs/review.md, Coding "
                "agents)"
            )
        else:
            warnings.append(
                "the command sent no spans: it connected to the OTLP endpoint but exported "
                "none (did it end its spans and call the tracer provider's shutdown() or "
                "force_flush() before exiting?)"
            )
    if o["spans_refused"]:
        why = "; ".join(o["spans_refused_why"]) or "the reason was not recorded"
        warnings.append(
            f"{o['spans_refused']} spans were refused for now ({why}); the exporter was told to "
            "retry later and may have given up"
        )
    if o["spans_rejected"]:
        why = "; ".join(o["spans_rejected_why"]) or "the reason was not recorded"
        warnings.append(
            f"{o['spans_rejected']} spans were rejected for good and not recorded (the receiver "
            f"answered: {why})"
        )
    if o["requests_malformed"]:
        why = "; ".join(o["requests_malformed_why"]) or (
            "an exporter configured for another encoding or protocol?"
        )
        warnings.append(
            f"{o['requests_malformed']} OTLP requests could not be decoded and were refused "
            f"with everything in them ({why})"
        )
    if o["metrics_requests_refused"]:
        warnings.append(
            f"the command sent {o['metrics_requests_refused']} metrics export requests: "
            "otel-bridge records traces and logs only, so they were refused (HTTP 404 / gRPC "
            "UNIMPLEMENTED) and not forwarded; set OTEL_METRICS_EXPORTER=none to silence the "
            "agent's exporter"
        )
    if o["requests_too_large"]:
        warnings.append(f"{o['requests_too_large']} OTLP requests were over the size limit")
    if conns is not None and conns["unroutable"]:
        warnings.append(
            f"{conns['unroutable']} connections to the OTLP endpoint closed before sending a "
            "request, or had no server for their protocol"
        )
    return warnings


_OUTCOMES = (
    ("delivered", "sent"),
    ("queued", "queued"),
    ("failed", "failed"),
    ("dropped", "dropped"),
)
"""What an exporter that sends to a destination did with its records (shown, counter verb)."""


def delivery_summary(collector: Collector) -> dict[str, Any]:
    """Per exporter of a ``-c`` file that sends to a destination (``otlp``, ``otlphttp``): the
    spans and log records it delivered, kept in its persistent queue at the end, failed and
    dropped, its queue directory; and ``warnings`` in plain words for what was not delivered."""
    telemetry = collector.host.telemetry
    exporters: dict[str, dict[str, Any]] = {}
    for eid in collector.component_ids(EXPORTER):
        try:
            counts = {
                shown: sum(
                    telemetry.value(f"{verb}_{noun}", kind=EXPORTER, id=eid)
                    for noun in ("spans", "log_records")
                )
                for shown, verb in _OUTCOMES
            }
        except UndeclaredCounterError:  # not an exporter that delivers somewhere
            continue
        exporters[eid] = {**counts, "storage": collector.status(eid).storage or None}
    return {"exporters": exporters, "warnings": _delivery_warnings(exporters)}


def _delivery_warnings(exporters: Mapping[str, Mapping[str, Any]]) -> list[str]:
    warnings = []
    for eid, d in sorted(exporters.items()):
        if d["queued"]:
            warnings.append(
                f"{eid} did not deliver {d['queued']} records: they are kept in its persistent "
                f"queue under {d['storage']}, which no later `observe` sends (each run queues in "
                "its own directory); a collector whose `sending_queue.storage` is that "
                "directory sends them"
            )
        if d["failed"] or d["dropped"]:
            warnings.append(
                f"{eid} did not deliver {d['failed'] + d['dropped']} records ({d['failed']} "
                f"failed, {d['dropped']} dropped): they are lost to its destination"
            )
    return warnings


def warnings_of(summary: Mapping[str, Any]) -> list[str]:
    """Every warning of a run summary: what CMD sent, then what was not delivered."""
    return [*summary["otlp"]["warnings"], *(summary.get("delivery") or {}).get("warnings", ())]


def write_report(run: rundir.RunDir, summary: Mapping[str, Any]) -> tuple[str, str]:
    """Write ``report.md`` from the run's graph.json; returns its text and the text to print,
    which leaves out the planes not fully available (the printed summary has a line for each
    plane above it; the file has every detail) (``("", "")`` without a graph)."""
    from otel_bridge.report import build, graph_of, render  # noqa: PLC0415 - end of a run only

    try:
        with open(run.file(rundir.GRAPH), "rb") as f:
            doc = orjson.loads(f.read())
    except (OSError, orjson.JSONDecodeError):
        return "", ""
    title = f"otel-bridge run {summary['run']['id']}: `{summary['command_line']}`"
    own = [(e["address"], e["port"]) for e in summary.get("collector_endpoints") or ()]
    built = build(graph_of(doc), own)
    text = _with_head(render(built, title=title, planes=summary["collection"]), summary)
    # printed after the summary's own line per plane: not said twice
    printed = _with_head(render(built, title=title, planes={}), summary)
    rundir.write_private(run.file(REPORT), text.encode())
    return text, printed


def _with_head(text: str, summary: Mapping[str, Any]) -> str:
    """``text`` with the run's exit code, warnings and forwarding after its title."""
    head = [f"Exit code {summary['exit_code']}.", ""]
    head += [f"**Warning:** {w}." for w in warnings_of(summary)]
    forward = summary.get("forward")
    if forward:
        head.append(_forward_line(forward))
    if len(head) > 2:
        head.append("")
    first, _, rest = text.partition("\n\n")
    return first + "\n\n" + "\n".join(head) + "\n" + rest


def _forward_line(forward: Mapping[str, Any]) -> str:
    """Where each signal was forwarded, over what, and how much arrived."""
    parts = []
    for signal, entry in forward["signals"].items():
        noun = {"traces": "spans", "logs": "log records", "metrics": "metrics requests"}[signal]
        if not entry["protocols"]:
            parts.append(f"{signal}: none arrived")
            continue
        same = entry["destination"].startswith(forward["destination"])
        text = (
            f"{signal}{'' if same else ' to ' + entry['destination']} over "
            f"{', '.join(entry['protocols'])} ({entry['protocol_source']}): "
            f"{entry['sent']} {noun} sent, {entry['not_sent']} not sent"
        )
        if signal == "metrics":
            text += " (forwarded only: otel-bridge does not record metrics)"
        parts.append(text)
    return f"Forwarded to {forward['destination']}: " + "; ".join(parts) + "."


def print_summary(
    run: rundir.RunDir, summary: Mapping[str, Any], report: str, *, verbose: bool = False
) -> None:
    """The end of ``observe`` on stderr: where the run is, how each plane was observed (one
    short line each: its state, backend, what observes it and what it misses; every detail with
    ``verbose``, as in ``summary.json`` and ``report.md``), the report."""
    out = sys.stderr
    signals = summary.get("signals_forwarded") or ()
    after = f" (after {', '.join(signals)}, passed on to the command)" if signals else ""
    print(
        f"otel-bridge: run {summary['run']['id']} exit code {summary['exit_code']}{after}",
        file=out,
    )
    print(f"  graph:    {run.file(rundir.GRAPH)}", file=out)
    print(f"  report:   {run.file(REPORT)}", file=out)
    print(f"  run dir:  {run.path}", file=out)
    backend = summary["host_backend_name"]
    if summary.get("host_backends_skipped"):  # why not a stronger one: what more would give
        backend += f" (not used here: {'; '.join(summary['host_backends_skipped'])})"
    print(f"  backend:  {backend}", file=out)
    print(f"  start:    {_start_line(summary.get('start') or {})}", file=out)
    planes = summary["collection"] if verbose else summary.get("collection_brief")
    for name, state in sorted((planes or summary["collection"]).items()):
        print(f"  {name + ':':9} {state}", file=out)
    otlp = summary["otlp"]
    print(
        f"  recorded: {otlp['spans_recorded']} spans ({otlp['spans_received']} from the "
        f"command), {summary['os_events']} OS events",
        file=out,
    )
    if summary.get("forward"):
        print(f"  {_forward_line(summary['forward'])}", file=out)
    for warning in warnings_of(summary):
        print(f"  warning: {warning}", file=out)
    if report:
        body = report.partition("## ")[2]
        print("", file=out)
        print("## " + body.rstrip(), file=out)


def _start_line(start: Mapping[str, Any]) -> str:
    """Which ``observe`` ran the command (the warm server's child, or this process) and whether
    its sources were armed before it ran."""
    armed = "armed" if start.get("armed") else "collector first"
    if start.get("server") == "warm":
        return f"warm server ({armed})"
    why = start.get("warm_unavailable")
    return f"cold ({armed}; {why})" if why else f"cold ({armed})"
