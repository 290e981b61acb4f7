"""``otel-bridge graph FILE``: query a graph.json (filters, bounded paths), as a table or JSON."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from otel_bridge.graph import GraphFilter, encode, filter_graph, load, simple_paths
from otel_bridge.graph.document import Graph, GraphEdge
from otel_bridge.graph.query import CAUSAL_STATUSES, path_edges
from otel_bridge.graph.summary import causal_name
from otel_bridge.rundir import graph_document
from otel_bridge.store.options import add_db_options, read_db, required_file


def register(subparsers: Any) -> None:
    """Add the ``graph`` subcommand."""
    p: argparse.ArgumentParser = subparsers.add_parser(
        "graph",
        help="query a graph.json: filter nodes and edges, find bounded paths",
        description=(
            "Filter a graph.json by node kind, stable key, relation, channel, backend, causal "
            "status and grade (a derived view; the file is not changed), or list bounded directed "
            "simple paths between two nodes. Repeat a filter option to accept several values."
        ),
    )
    p.add_argument(
        "file", metavar="FILE", nargs="?", help="a graph.json or a run directory (or --db)"
    )
    add_db_options(p)
    p.add_argument("--kind", action="append", default=[], help="node kind (agent, process, ...)")
    p.add_argument("--key", action="append", default=[], help="node stable key (exact match)")
    p.add_argument("--relation", action="append", default=[], help="edge relation (spawned, ...)")
    p.add_argument("--channel", action="append", default=[], help="sem, gw, model or os")
    p.add_argument("--backend", action="append", default=[], help="otlp, linux, strace, ...")
    p.add_argument(
        "--causal", action="append", default=[], choices=CAUSAL_STATUSES, help="causal status"
    )
    p.add_argument("--grade", action="append", default=[], choices="ABCDU", help="evidence grade")
    p.add_argument("--path", nargs=2, metavar=("FROM", "TO"), help="list paths FROM -> TO")
    p.add_argument("--max-depth", type=int, default=6, help="path length limit (default: 6)")
    p.add_argument("--max-paths", type=int, default=20, help="paths listed at most (default: 20)")
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Execute the command."""
    if args.db:
        graph = Graph.from_dict(read_db(args))
    else:
        graph = load(graph_document(required_file(args, "FILE")))
    _say_absent(graph, args)
    flt = GraphFilter(
        kinds=frozenset(args.kind),
        keys=frozenset(args.key),
        relations=frozenset(args.relation),
        channels=frozenset(args.channel),
        backends=frozenset(args.backend),
        causal=frozenset(args.causal),
        grades=frozenset(args.grade),
    )
    view = filter_graph(graph, flt)
    if args.path:
        return _paths(view, args)
    if args.json:
        sys.stdout.write(encode(view.to_dict()).decode())
        return 0
    _print_table(view)
    return 0


def _say_absent(graph: Graph, args: argparse.Namespace) -> None:
    """A filter value that matches nothing in the whole graph (a typo, or the wrong name) is
    said on stderr with the values present, so an empty answer is not mistaken for absence."""
    present = {
        "kind": {n.kind for n in graph.nodes},
        "key": {n.key for n in graph.nodes},
        "relation": {e.relation for e in graph.edges},
        "channel": {c for n in graph.nodes for c in n.channels}
        | {c for e in graph.edges for c in e.channels},
        "backend": {b for n in graph.nodes for b in n.backends}
        | {b for e in graph.edges for b in e.backends},
    }
    for option, values in present.items():
        for value in getattr(args, option):
            if value not in values:
                shown = ", ".join(sorted(values)[:20]) if option != "key" else "see --json"
                print(
                    f"otel-bridge graph: no {option} {value!r} in this graph ({shown or 'none'})",
                    file=sys.stderr,
                )


def _paths(view: Graph, args: argparse.Namespace) -> int:
    source, target = args.path
    paths = simple_paths(view, source, target, max_depth=args.max_depth, max_paths=args.max_paths)
    if args.json:
        out = [
            {
                "nodes": p,
                "edges": [[e.id for e in hop] for hop in path_edges(view, p)],
            }
            for p in paths
        ]
        sys.stdout.write(encode({"paths": out}).decode())
        return 0 if paths else 1
    if not paths:
        print(f"no path from {source} to {target} within {args.max_depth} edges")
        return 1
    for i, p in enumerate(paths, 1):
        hops = path_edges(view, p)
        line = p[0]
        for hop, node in zip(hops, p[1:], strict=True):
            line += f" -[{_hop(hop)}]-> {node}"
        print(f"{i}. {line}")
    return 0


def _hop(hop: list[GraphEdge]) -> str:
    """The relations of one hop; a relation resting on an inferred edge says so with its grade,
    so a path through a likely match does not read as one through observed links."""
    parts = []
    for relation in sorted({e.relation for e in hop}):
        inferred = {
            e.grade for e in hop if e.relation == relation and e.inferred in (True, "mixed")
        }
        parts.append(
            f"{relation} (inferred, {'/'.join(sorted(inferred))})" if inferred else relation
        )
    return ",".join(parts)


def _rows(headers: list[str], rows: list[list[str]]) -> None:
    widths = [
        max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(headers)
    ]
    print("  ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True)).rstrip())
    for row in rows:
        print("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip())


def _print_table(view: Graph) -> None:
    print(f"nodes ({len(view.nodes)})")
    _rows(
        ["KIND", "ID", "LABEL", "CHANNELS", "LOGICAL", "EVIDENCE"],
        [
            [
                n.kind,
                n.id,
                n.label,
                ",".join(n.channels),
                str(n.logical_count),
                str(n.evidence_count),
            ]
            for n in view.nodes
        ],
    )
    print()
    print(f"edges ({len(view.edges)})")
    _rows(
        ["RELATION", "SOURCE", "TARGET", "CHANNELS", "CAUSAL", "GRADE", "LOGICAL", "EVIDENCE"],
        [
            [
                e.relation,
                e.source,
                e.target,
                ",".join(e.channels),
                causal_name(e.causal),
                e.grade,
                str(e.logical_count),
                str(e.evidence_count),
            ]
            for e in view.edges
        ],
    )
    coverage = view.summary.get("coverage", {})
    if coverage:
        print()
        print("coverage")
        _rows(["REASON", "COUNT"], [[k, str(v)] for k, v in sorted(coverage.items())])
