"""``otel-bridge export FILE --format prov|graphml|json -o OUT``: convert a graph.json.

``-o -`` writes the document to standard output (and the ``wrote ...`` line to standard error,
so the output can be piped); any other OUT is a file, replaced atomically. An OUT whose writing
would lose evidence is refused before anything is written: a directory, the graph being
exported, or a file in a run directory (its manifest seals it: ``verify`` would fail)."""

from __future__ import annotations

import argparse
import io
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

import orjson

from otel_bridge.errors import OtelBridgeError
from otel_bridge.graph import encode, load, to_prov, write_graphml
from otel_bridge.graph.document import Graph, write_atomic
from otel_bridge.rundir import MANIFEST, graph_document


def register(subparsers: Any) -> None:
    """Add the ``export`` subcommand."""
    p: argparse.ArgumentParser = subparsers.add_parser(
        "export",
        help="convert a graph.json to W3C PROV-JSON, GraphML or normalized JSON",
        description=(
            "Convert a graph.json. prov: W3C PROV-JSON (agents, activities, entities; the "
            "evidence fields ride along as ob: attributes). graphml: GraphML for graph tools "
            "(lists and objects as JSON text). json: the validated, canonical graph.json."
        ),
    )
    p.add_argument("file", metavar="FILE", help="a graph.json, or a run directory")
    p.add_argument("--format", required=True, choices=("prov", "graphml", "json"))
    p.add_argument(
        "-o",
        "--output",
        required=True,
        metavar="OUT",
        help="file to write ('-': standard output; a file named - is ./-)",
    )
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Execute the command."""
    source = graph_document(args.file)
    if args.output != "-":
        _check_output(Path(args.output), source)
    graph = load(source)
    if args.output == "-":
        sys.stdout.buffer.write(_document(graph, args.format))
        sys.stdout.buffer.flush()
        print(_wrote("standard output", args.format, graph), file=sys.stderr)
        return 0
    out = Path(args.output)
    if args.format == "graphml":
        out.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{out.name}.", suffix=".tmp", dir=out.parent)
        os.close(fd)
        try:
            write_graphml(graph, tmp)
            os.chmod(tmp, 0o600)
            os.replace(tmp, out)
        finally:
            if os.path.exists(tmp):
                os.unlink(tmp)
    else:
        write_atomic(out, _document(graph, args.format))
    print(_wrote(str(out), args.format, graph))
    return 0


def _check_output(out: Path, source: str) -> None:
    """Refuse an ``out`` whose writing would fail half-way or lose what is there."""
    if out.is_dir():
        raise OtelBridgeError(f"{out}: is a directory; -o names the file to write")
    if out.exists() and os.path.exists(source) and os.path.samefile(out, source):
        raise OtelBridgeError(f"{out}: is the graph being exported; write the export elsewhere")
    if (out.parent / MANIFEST).exists():
        raise OtelBridgeError(
            f"{out}: is inside the run directory {out.parent}, which its {MANIFEST} seals (a "
            "file written there would make otel-bridge verify fail); write the export elsewhere"
        )


def _document(graph: Graph, fmt: str) -> bytes:
    """``graph`` in ``fmt``, as the bytes written."""
    if fmt == "prov":
        return (
            orjson.dumps(to_prov(graph), option=orjson.OPT_SORT_KEYS | orjson.OPT_INDENT_2) + b"\n"
        )
    if fmt == "json":
        return encode(graph.to_dict())
    buffer = io.BytesIO()
    write_graphml(graph, buffer)
    return buffer.getvalue()


def _wrote(where: str, fmt: str, graph: Graph) -> str:
    return f"wrote {where} ({fmt}, {len(graph.nodes)} nodes, {len(graph.edges)} edges)"
