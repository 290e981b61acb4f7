"""``otel-bridge run [-c CONFIG]``: run the collector until SIGINT/SIGTERM, then drain."""

from __future__ import annotations

import argparse
import importlib.resources
import logging
import os
import sys
from collections.abc import Iterator

from otel_bridge.component import COLLECTOR, EXPORTER, RECEIVER, UndeclaredCounterError
from otel_bridge.config import CollectorConfig, load_config, load_yaml, parse_config
from otel_bridge.pipeline import Collector

_EMBEDDED = "local.yaml"


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the ``run`` command."""
    parser = subparsers.add_parser(
        "run",
        help="run the collector until interrupted",
        description=(
            "Start every pipeline of CONFIG (default: the embedded local.yaml: OTLP on "
            "127.0.0.1:4317/4318 plus host observation, evidence graph in "
            "./otel-bridge-graph.json) and run until SIGINT or SIGTERM, then drain and exit 0."
        ),
    )
    parser.add_argument("-c", "--config", metavar="CONFIG", help="YAML configuration file")
    parser.add_argument(
        "--verbose",
        action="store_true",
        help="say each plane's observation in full (default: one short line per plane)",
    )
    parser.add_argument(
        "--progress",
        action="store_true",
        help="print a one-line progress report to stderr periodically (default: when a TTY)",
    )
    parser.add_argument(
        "--progress-interval",
        type=float,
        default=5.0,
        metavar="SECONDS",
        help="seconds between progress lines (default: %(default)s)",
    )
    parser.set_defaults(func=run)


def embedded_config_text() -> str:
    """The text of the embedded default configuration (``otel_bridge/configs/local.yaml``)."""
    return (importlib.resources.files("otel_bridge.configs") / _EMBEDDED).read_text("utf-8")


def load_run_config(path: str | None) -> CollectorConfig:
    """The configuration at ``path``, or the embedded default when ``path`` is None."""
    if path is not None:
        return load_config(path)
    origin = f"<embedded {_EMBEDDED}>"
    return parse_config(load_yaml(embedded_config_text(), origin), origin=origin)


def describe_endpoints(collector: Collector, *, verbose: bool = False) -> Iterator[str]:
    """Human-readable lines naming where each receiver listens and each exporter writes; a
    receiver with a backend (the host receiver) is named by its backend (with why it was
    chosen and why others were not when ``verbose``: its planes' lines say the rest)."""
    for rid in collector.component_ids(RECEIVER):
        status = collector.status(rid)
        parts = [
            f"OTLP/{e.protocol} on {e.host}:{e.port}"
            for e in sorted(status.endpoints, key=lambda e: e.protocol)
        ]
        if not parts and status.backend and not verbose:
            skipped = ", ".join(s.partition(":")[0] for s in status.skipped)
            parts = [status.backend + (f" (not used here: {skipped})" if skipped else "")]
        if not parts and status.detail:
            parts = [status.detail]
        yield f"receiver {rid}: " + (", ".join(parts) if parts else "started")
    for eid in collector.component_ids(EXPORTER):
        config = collector.config.exporters[eid].config
        target = next(
            (
                str(v)
                for name in ("output", "path", "endpoint")
                if (v := getattr(config, name, None)) not in (None, "")
            ),
            "",
        )
        yield f"exporter {eid}" + (f": {target}" if target else "")


_UNSEEN = "what it did not see is unknown, not absent"


def describe_planes(
    collector: Collector, *, gaps_only: bool = False, verbose: bool = False
) -> Iterator[str]:
    """One line per collection a receiver reports (the host receiver's process, file and
    network planes and, standing, the lineage it follows): ``receiver ID: PLANE: state:
    backend: why``, the why in a few words (every detail with ``verbose``). With ``gaps_only``,
    only those not fully available, each saying that what it did not see is unknown (``run``'s
    last lines: what the collector could not observe)."""
    for rid in collector.component_ids(RECEIVER):
        status = collector.status(rid)
        planes = status.collections if verbose else (status.briefs or status.collections)
        for plane, state in sorted(planes.items()):
            if not gaps_only:
                yield f"receiver {rid}: {plane}: {state}"
            elif not state.startswith("available"):
                yield f"receiver {rid}: {plane}: {state}; {_UNSEEN}"


def describe_unlinked(collector: Collector) -> Iterator[str]:
    """The notes of each pipeline's processors (the correlate processor: senders that could not
    be linked to their process, and why), each once: ``processor ID: note``."""
    said: set[str] = set()
    for pid, pipeline in collector.config.pipelines.items():
        for proc_id, status in zip(
            pipeline.processors, collector.pipeline_statuses(pid), strict=False
        ):
            for note in status.notes:
                if note not in said:
                    said.add(note)
                    yield f"processor {proc_id}: {note}"


_DELIVERY = (
    ("delivered", "sent"),
    ("queued", "queued"),
    ("failed", "failed"),
    ("dropped", "dropped"),
)
"""Outcomes of the exporters that send to a destination (``otlp``, ``otlphttp``): what the
destination accepted, what waits in a persistent queue for the next start (said only when
some does: neither delivered nor lost), what failed for good, what was dropped (queue full,
shutdown)."""

_HOST = "host"
"""The receiver type whose log records are OS events (the OS plane)."""


def received_counts(collector: Collector) -> str:
    """What the receivers accepted and handed to the pipelines, each kind by its name: spans,
    log records (the telemetry senders' logs) and OS events (the host receiver's records; the
    same words as ``observe``'s ``recorded:`` line), then evidence records a receiver handed over
    ready-made (an importer's), said only when there are some."""
    telemetry = collector.host.telemetry
    routed = telemetry.by_label("routed", kind=RECEIVER)
    os_events = telemetry.total("routed", kind=RECEIVER, type=_HOST, label="logs")
    text = (
        f"received {routed.get('spans', 0)} spans, {routed.get('logs', 0) - os_events} log "
        f"records, {os_events} OS events"
    )
    evidence = routed.get("observations", 0) + routed.get("coverage", 0)
    return text + (f", {evidence} evidence records" if evidence else "")


def delivered_counts(collector: Collector) -> list[str]:
    """Per exporter that delivers to a destination (``otlp``, ``otlphttp``): ``ID: delivered N
    spans, N log records`` (what its destination accepted), then what it keeps queued for its
    next start (when some), failed and dropped (records of either kind)."""
    telemetry = collector.host.telemetry
    out = []
    for eid in collector.component_ids(EXPORTER):
        try:
            spans = telemetry.value("sent_spans", kind=EXPORTER, id=eid)
            logs = telemetry.value("sent_log_records", kind=EXPORTER, id=eid)
            other = {
                shown: sum(
                    telemetry.value(f"{verb}_{noun}", kind=EXPORTER, id=eid)
                    for noun in ("spans", "log_records")
                )
                for shown, verb in _DELIVERY[1:]
            }
        except UndeclaredCounterError:  # not an exporter that delivers to a destination
            continue
        queued = other.pop("queued")
        text = f"{eid}: delivered {spans} spans, {logs} log records"
        if queued:
            text += f", queued {queued} (persistent queue)"
        out.append(text + "".join(f", {shown} {n}" for shown, n in other.items()))
    return out


def progress_line(collector: Collector) -> str:
    """One line: uptime; what the receivers accepted (spans, log records, OS events); records
    the pipelines refused for now or rejected; records an exporter raised on (by exporter when
    some); and,
    per exporter that delivers to a destination, what it delivered, kept queued (in a
    persistent queue, at shutdown), failed and dropped (an exporter that queues accepts a
    record before it is delivered, or lost)."""
    telemetry = collector.host.telemetry
    refused = telemetry.total("refused", kind=RECEIVER)
    rejected = telemetry.total("rejected", kind=RECEIVER)
    line = (
        f"otel-bridge: up {collector.uptime:.0f}s | {received_counts(collector)} | "
        f"refused {refused} | rejected {rejected}"
    )
    errors = {
        eid: n
        for eid in collector.component_ids(EXPORTER)
        if (n := telemetry.value("failed", kind=EXPORTER, id=eid))
    }
    line += f" | exporter errors {sum(errors.values())}"
    if errors:  # which exporter raised on how many records
        line += f" ({', '.join(f'{eid} {n}' for eid, n in errors.items())})"
    line += _turned_away(collector)
    line += _copies(collector)
    delivered = delivered_counts(collector)
    return line + "".join(f" | {d}" for d in delivered)


_TURNED_AWAY = (
    ("requests_malformed", "requests not decoded"),
    ("requests_too_large", "requests over the size limit"),
    ("metrics_requests_unsupported", "metrics requests refused"),
)
"""Requests the receivers answered with an error, said once there are some: the sender was told,
but so far the collector's operator was not."""


_COPY_COUNTERS = (("redelivered", "observations"), ("resent_dropped", "lines"))
"""An exporter's count of the copies it received again and did not apply or write twice, and
what it counts: the ``graph`` exporter's ``redelivered`` observations (a sender's retry, a
resend after a kill), the ``file`` exporter's ``resent_dropped`` lines (copies of the lines it
found at the end of its file when it started, ``append: true``). Normal, but something the
operator should be able to see."""


def _copies(collector: Collector) -> str:
    """``| copies not applied again (ID N UNIT, ...)``, once some exporter dropped a copy."""
    telemetry = collector.host.telemetry
    found = []
    for eid in collector.component_ids(EXPORTER):
        for counter, unit in _COPY_COUNTERS:
            try:
                n = telemetry.value(counter, kind=EXPORTER, id=eid)
            except UndeclaredCounterError:  # this exporter does not drop copies
                continue
            if n:
                found.append(f"{eid} {n} {unit}")
    return f" | copies not applied again ({', '.join(found)})" if found else ""


def _turned_away(collector: Collector) -> str:
    telemetry = collector.host.telemetry
    out = ""
    for counter, shown in _TURNED_AWAY:
        try:
            n = telemetry.total(counter, kind=RECEIVER)
        except UndeclaredCounterError:  # no receiver here answers requests
            continue
        if n:
            out += f" | {shown} {n}"
    return out


def run(args: argparse.Namespace) -> int:
    """Run until a signal; exit 0 after a clean drain."""
    config = load_run_config(args.config)
    if config.log_level is not None and getattr(args, "log_level", None) is None:
        logging.getLogger("otel_bridge").setLevel(config.log_level.upper())  # no --log-level
    for warning in config.warnings:
        print(f"otel-bridge: warning: {warning}", file=sys.stderr)
    collector = Collector(config)

    def started() -> None:
        planes = describe_planes(collector, verbose=args.verbose)
        for line in (*describe_endpoints(collector, verbose=args.verbose), *planes):
            print(f"otel-bridge: {line}", file=sys.stderr)
        print(f"otel-bridge: running (pid {os.getpid()}); Ctrl-C to stop", file=sys.stderr)
        sys.stderr.flush()

    show_progress = bool(args.progress) or sys.stderr.isatty()

    def tick() -> None:
        print(progress_line(collector), file=sys.stderr, flush=True)

    signum = collector.run_until_signal(
        on_started=started,
        on_tick=tick if show_progress else None,
        tick_interval=max(float(args.progress_interval), 0.1),
    )
    errors = collector.host.telemetry.value("shutdown_errors", kind=COLLECTOR, id="service")
    print(progress_line(collector), file=sys.stderr)
    gaps = describe_planes(collector, gaps_only=True, verbose=args.verbose)
    for line in (*gaps, *describe_unlinked(collector)):
        print(f"otel-bridge: {line}", file=sys.stderr)
    print(
        f"otel-bridge: stopped{f' by signal {signum}' if signum else ''}; drained",
        file=sys.stderr,
    )
    return 1 if errors else 0
