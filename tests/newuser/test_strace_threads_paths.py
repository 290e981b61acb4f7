"""The strace backend records a thread's calls as its process's, and paths as the files' names.

Found observing a plain OpenTelemetry SDK agent as an unprivileged user (the `strace` backend):

* ``strace -f`` names every line by the *thread* id. Each thread of the agent (the gRPC
  exporter starts several) became a process of its own, with the agent's argv, "spawned" by the
  agent's parent (here `observe` itself) at grade A, causal: a relation nothing observed. The
  thread's own calls (a file it wrote, the exporter's connect) went to that phantom process.
* Paths come from strace's ``-yy`` annotation, which strace escapes (``<`` ``>`` and every byte
  outside printable ASCII as octal) and suffixes for a device (``/dev/null<char 1:3>``): the
  graph had ``caf\\303\\251.txt`` for ``café.txt``, ``a\\74b\\76.txt`` for ``a<b>.txt`` and a
  file node ``/dev/null<char 1:3>``; a name that is not UTF-8 escaped the text rule
  (docs/strings.md) instead of being replaced and flagged.
* The gRPC exporter's IPv6 socket connects to ``::ffff:127.0.0.1``: the endpoint was
  ``endpoint:tcp:::ffff:127.0.0.1:PORT`` under strace, ``127.0.0.1`` under the other backends.

A real ``observe`` with the strace backend of a workload that does all of it.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

OBSERVE = (
    sys.executable,
    "-m",
    "otel_bridge",
    "observe",
    "--no-review",
    "--set",
    "receivers.host.backend=strace",
)
WORKLOAD = """
import os, threading
open("caf\\u00e9.txt", "w").close()
open("a<b>.txt", "w").close()
open(b"caf\\xe9.bin", "w").close()
open("/dev/null", "w").close()
tids = []
def work():
    tids.append(threading.get_native_id())
    with open("from-thread.txt", "w") as f:
        f.write("x")
thread = threading.Thread(target=work)
thread.start()
thread.join()
import socket
server = socket.socket(socket.AF_INET6)
server.bind(("::ffff:127.0.0.1", 0))
server.listen()
port = server.getsockname()[1]
client = socket.socket(socket.AF_INET6)
client.connect(("::ffff:127.0.0.1", port))
client.close()
server.close()
with open("ids.json", "w") as f:
    f.write('{"pid": %d, "tid": %d, "port": %d}' % (os.getpid(), tids[0], port))
"""


@dataclass(frozen=True)
class Observed:
    """One strace-backed ``observe`` of :data:`WORKLOAD`."""

    workdir: Path
    ids: dict[str, int]
    graph: dict[str, Any]
    opened: set[str]
    """Every ``file.path`` of the run's OS records (``os.jsonl``)."""


@pytest.fixture(scope="module")
def observed(tmp_path_factory: pytest.TempPathFactory) -> Observed:
    if shutil.which("strace") is None:
        pytest.skip("strace is not installed")
    workdir = tmp_path_factory.mktemp("strace-workload")
    (workdir / "workload.py").write_text(WORKLOAD, encoding="utf-8")
    run = workdir / "run"
    done = subprocess.run(
        [*OBSERVE, "-o", str(run), "--", sys.executable, "workload.py"],
        check=False,
        cwd=workdir,
        capture_output=True,
        text=True,
        timeout=300,
        env=os.environ.copy(),
    )
    assert done.returncode == 0, done.stderr
    if "file:     available: strace" not in done.stdout + done.stderr:
        pytest.skip(f"the strace file plane is not available here: {done.stderr[-400:]}")
    ids = json.loads((workdir / "ids.json").read_text(encoding="utf-8"))
    assert ids["pid"] != ids["tid"]
    graph = json.loads((run / "graph.json").read_text(encoding="utf-8"))
    opened = set()
    for line in (run / "os.jsonl").read_text(encoding="utf-8").splitlines():
        for resource in json.loads(line).get("resourceLogs", []):
            for scope in resource["scopeLogs"]:
                for record in scope["logRecords"]:
                    for attr in record.get("attributes", []):
                        if attr["key"] == "file.path":
                            opened.add(attr["value"]["stringValue"])
    return Observed(workdir, ids, graph, opened)


def test_paths_are_the_files_names(observed: Observed) -> None:
    files = {n["label"] for n in observed.graph["nodes"] if n["kind"] == "file"}
    for name in ("caf\u00e9.txt", "a<b>.txt", "caf\ufffd.bin", "from-thread.txt"):
        assert f"{observed.workdir}/{name}" in files, sorted(files)
    assert not [f for f in files if "\\" in f or "<char" in f], sorted(files)
    # /dev/null is folded with the interpreter's reads in graph.json; its record names it.
    assert "/dev/null" in observed.opened, sorted(observed.opened)
    assert not [f for f in observed.opened if "\\" in f or "<char" in f], sorted(observed.opened)


def _pid(node: dict[str, Any]) -> int | None:
    facts = node.get("facts") or {}
    pid = facts.get("pid")
    return pid if isinstance(pid, int) else None


def test_a_thread_is_its_process(observed: Observed) -> None:
    graph, ids = observed.graph, observed.ids
    nodes = {n["id"]: n for n in graph["nodes"]}
    processes = {nid: _pid(n) for nid, n in nodes.items() if n["kind"] == "process"}
    # No process node is the thread.
    assert ids["tid"] not in processes.values(), sorted(n["label"] for n in nodes.values())
    workload = [nid for nid, pid in processes.items() if pid == ids["pid"]]
    assert len(workload) == 1
    # The file the thread wrote is the workload process's.
    target = f"file:{observed.workdir}/from-thread.txt"
    assert {e["source"] for e in graph["edges"] if e["target"] == target} == set(workload)
    # The workload started no process (its thread is none), and the root's own parent is not
    # followed, so nothing was "spawned" (docs/host.md, "The root's parent").
    spawned = [e for e in graph["edges"] if e["relation"] == "spawned"]
    assert spawned == [], spawned
    assert nodes[workload[0]]["facts"]["parent_pid"] is not None


def test_an_ipv4_mapped_address_is_the_ipv4_address(observed: Observed) -> None:
    """An IPv6 socket connected to ``::ffff:127.0.0.1`` reached the endpoint every other source
    (the socket tables, the socket tracer, a span's ``server.address``) names ``127.0.0.1``."""
    port = observed.ids["port"]
    endpoints = {n["id"] for n in observed.graph["nodes"] if n["kind"] == "endpoint"}
    assert f"endpoint:tcp:127.0.0.1:{port}" in endpoints, sorted(endpoints)
    assert not [e for e in endpoints if "::ffff:" in e], sorted(endpoints)
    workload = f":{observed.ids['pid']}:"
    connected = [
        e
        for e in observed.graph["edges"]
        if e["relation"] == "connected_to" and e["target"] == f"endpoint:tcp:127.0.0.1:{port}"
    ]
    assert [workload in e["source"] for e in connected] == [True], connected
