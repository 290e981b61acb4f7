"""``otel-bridge export FILE --format prov|graphml|json -o OUT``: convert a graph.json."""

from __future__ import annotations

import argparse
import os
import tempfile
from pathlib import Path
from typing import Any

import orjson

from otel_bridge.graph import encode, load, to_prov, write_graphml
from otel_bridge.graph.document import write_atomic
from otel_bridge.rundir import graph_document


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
    p.add_argument("-o", "--output", required=True, metavar="OUT", help="file to write")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Execute the command."""
    graph = load(graph_document(args.file))
    out = Path(args.output)
    if args.format == "prov":
        data = orjson.dumps(to_prov(graph), option=orjson.OPT_SORT_KEYS | orjson.OPT_INDENT_2)
        write_atomic(out, data + b"\n")
    elif args.format == "json":
        write_atomic(out, encode(graph.to_dict()))
    else:
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
    print(f"wrote {out} ({args.format}, {len(graph.nodes)} nodes, {len(graph.edges)} edges)")
    return 0
