"""Runtime reads folded into one node per process (``otel_bridge/graph/fold.py``)."""

from __future__ import annotations

import hashlib
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from otel_bridge.graph import validate_document
from otel_bridge.graph.fold import (
    CLASSES,
    KIND,
    could_be_runtime_read,
    file_candidates,
    fold_runtime_reads,
    runtime_read_class,
)
from otel_bridge.testing import graph_document, graph_edge_doc, graph_node_doc

P = "process:h:10:1"
Q = "process:h:11:2"


def edge_id(source: str, relation: str, target: str) -> str:
    """An edge's stable id as ``docs/graph.md`` defines it."""
    digest = hashlib.blake2b(f"{source}\0{relation}\0{target}".encode(), digest_size=8)
    return "e-" + digest.hexdigest()


def _node(node_id: str, kind: str) -> dict[str, Any]:
    return graph_node_doc(
        node_id,
        kind,
        label="python3 (10)" if kind == "process" else node_id[5:],
        key="process:/usr/bin/python3:python3 job.py" if kind == "process" else "",
        first_seen=5,
        last_seen=9,
    )


def _edge(source: str, relation: str, target: str, n: int, t: int) -> dict[str, Any]:
    return graph_edge_doc(
        edge_id(source, relation, target),
        source,
        relation,
        target,
        support=[f"obs-{target}"],
        first_seen=t,
        last_seen=t + 1,
        logical_count=n,
        evidence_count=n,
    )


def _doc(run: dict[str, Any] | None = None) -> dict[str, Any]:
    so, pyc = "file:/usr/lib/libz.so.1", "file:/opt/app/__pycache__/m.cpython-311.pyc"
    written_pyc, data = "file:/opt/app/__pycache__/new.cpython-311.pyc", "file:/etc/app.conf"
    nodes = [_node(P, "process"), _node(Q, "process")]
    nodes += [_node(f, "file") for f in (so, pyc, written_pyc, data)]
    edges = [
        _edge(P, "opened", so, 2, 100),
        _edge(P, "opened", pyc, 3, 50),
        _edge(P, "opened", written_pyc, 1, 70),
        _edge(P, "created", written_pyc, 1, 71),
        _edge(P, "opened", data, 1, 80),
        _edge(Q, "opened", so, 1, 300),
    ]
    return graph_document(nodes, edges, run=run, observations=9)


@pytest.mark.parametrize(
    ("path", "cls"),
    [
        ("/usr/lib/python3.11/json/__init__.py", "interpreter library"),
        ("/root/.venv/lib/python3.11/site-packages/x/y.py", "installed packages"),
        ("/a/__pycache__/b.cpython-311.pyc", "python bytecode"),
        ("/lib/x86_64-linux-gnu/libc.so.6", "shared library"),
        ("/etc/ld.so.cache", "shared library"),
        ("/proc/self/status", "kernel interface"),
        ("/sys/devices/system/cpu/online", "kernel interface"),
        ("/usr/lib/locale/C.utf8/LC_CTYPE", "locale and fonts"),
        ("/var/cache/fontconfig/x.cache-8", "locale and fonts"),
        ("/home/me/project/report.csv", None),
        ("/etc/passwd", None),
        ("/tmp/job/out.json", None),
    ],
)
def test_runtime_read_classes(path: str, cls: str | None) -> None:
    """Interpreter, library, kernel-interface and locale reads are runtime; work files are not."""
    assert runtime_read_class(path) == cls


_FRAGMENTS = (
    "/",
    "a",
    "x.py",
    ".pyc",
    ".pyo",
    "/__pycache__/",
    ".so",
    ".so.6",
    ".1",
    "/etc/ld.so.",
    "/site-packages/",
    "/dist-packages/",
    "/lib/python3.11/",
    "/lib/node_modules/",
    "/proc/",
    "/sys/",
    "/locale",
    "/fonts/",
    "/font/",
    "fontconfig",
    "/zoneinfo/",
    "/gconv/",
    "/dev/",
    "null",
    "zero",
    "urandom",
    "random",
    "\n",
    "tmp",
    "home",
)


@given(st.lists(st.sampled_from(_FRAGMENTS), max_size=8).map("".join))
def test_runtime_read_class_equals_its_reference(path: str) -> None:
    """The substring pre-test and the one-search rejection give what the plain loop over the
    classes gives, for paths built from every pattern's pieces (anchors and ends included)."""
    reference = next((name for name, pattern in CLASSES if pattern.search(path)), None)
    assert runtime_read_class(path) == reference
    # The fold's test of a node id (``file:`` and the path, read from offset 5) rejects none.
    if reference is not None:
        assert could_be_runtime_read(f"file:{path}", 5)


_IDS = st.lists(
    st.sampled_from(_FRAGMENTS).map("".join)
    | st.lists(st.sampled_from(_FRAGMENTS), max_size=6).map(lambda parts: "file:" + "".join(parts))
    | st.sampled_from(("process:h:1:2", "file:", "runtime_reads:process:h:1:2")),
    max_size=12,
)


@given(_IDS)
def test_file_candidates_miss_no_runtime_read(ids: list[str]) -> None:
    """The joined search finds every ``file:`` id the per-id test accepts, in order and once
    each (it may find more: the fold tests each candidate)."""
    found = file_candidates(ids)
    expected = {
        i for i, t in enumerate(ids) if t.startswith("file:") and could_be_runtime_read(t, 5)
    }
    assert expected <= set(found)
    assert found == sorted(set(found))
    assert all(0 <= i < len(ids) for i in found)


def test_file_candidates_of_plain_files_and_runtime_reads() -> None:
    """Work files are no candidates; each runtime read is, wherever it stands."""
    plain = [f"file:/srv/data/file-{i:05d}.bin" for i in range(50)]
    assert file_candidates(plain) == []
    ids = [*plain, "file:/usr/lib/libz.so.1", *plain, "file:/proc/self/status", "file:/a.pyc"]
    assert file_candidates(ids) == [50, 101, 102]


def test_fold_merges_runtime_reads_per_process_and_keeps_everything_else() -> None:
    """Each process's runtime reads become one node and one edge with summed counts; a file
    the process also created, and a non-runtime file, stay; the result is a valid document."""
    doc = _doc()
    out = fold_runtime_reads(doc)
    validate_document(out)
    ids = {n["id"] for n in out["nodes"]}
    assert "file:/usr/lib/libz.so.1" not in ids
    assert "file:/opt/app/__pycache__/m.cpython-311.pyc" not in ids
    assert "file:/opt/app/__pycache__/new.cpython-311.pyc" in ids  # it was created: kept
    assert "file:/etc/app.conf" in ids
    folded = {n["id"]: n for n in out["nodes"] if n["kind"] == KIND}
    assert set(folded) == {f"{KIND}:{P}", f"{KIND}:{Q}"}
    node = folded[f"{KIND}:{P}"]
    assert node["attrs"]["files"] == 2
    assert node["attrs"]["by_class"] == {"python bytecode": 1, "shared library": 1}
    assert node["key"] == f"{KIND}:process:/usr/bin/python3:python3 job.py"
    edge = next(e for e in out["edges"] if e["target"] == f"{KIND}:{P}")
    assert edge["relation"] == "opened"
    assert edge["evidence_count"] == 5  # 2 + 3: nothing lost from the totals
    assert (edge["first_seen"], edge["last_seen"]) == (50, 101)
    assert edge["support"] == [
        "obs-file:/opt/app/__pycache__/m.cpython-311.pyc",
        "obs-file:/usr/lib/libz.so.1",
    ]
    assert (edge["causal"], edge["grade"]) == (True, "A")
    assert out["summary"]["nodes"] == len(out["nodes"]) == 6
    assert out["summary"]["edges_by_relation"] == {"created": 1, "opened": 4}
    assert sum(e["evidence_count"] for e in out["edges"]) == sum(
        e["evidence_count"] for e in doc["edges"]
    )


def test_keep_leaves_the_graph_as_it_is() -> None:
    """``run.runtime_reads == "keep"`` (``observe --keep-runtime-reads``) turns folding off."""
    doc = _doc({"runtime_reads": "keep"})
    assert fold_runtime_reads(doc) is doc
