"""Host-plane fidelity off the happy path (issue 12): the default backend against receipts.

Three checks, each against receipts the workload writes itself, with two busy processes loading
both cores throughout:

* **short connections**: a lineage process makes ``n`` 1 ms ``urllib.request.urlopen`` requests
  to a local ``http.server`` that answers with the client's port; the workload writes (pid,
  port) per request. Counted: requests recorded at all, recorded with the right pid, recorded
  without a pid (session/network-namespace attribution), recorded with a wrong pid, duplicates.
  Run twice: released once the ``linux`` backend's socket tracer said it attached (a
  standing collector), and released as soon as the receiver's ``start`` returned (as
  ``observe`` does). The perf tracer (the default) is attached inside ``start``; bpftrace
  (``--socket-tracer bpftrace``) attaches seconds later, and connections closed before then
  cannot be attributed. Python's start-up takes seconds on a loaded machine, so a third run
  makes the requests from bash's ``/dev/tcp`` at the script's first line, tens of ms after the
  release. The attach time, the receiver's start time and the load are printed.
* **phantom connections**: a lineage server accepts ``n`` connections from the harness, closing
  its listener after each ``accept()``; any ``network.connect`` from the server's side (local
  port = its listening port, or peer port = a harness client port) is a phantom.
* **short children**: three host receivers run at once (separate processes, like three parallel
  ``observe`` runs), each over a Python parent starting ``n`` ~5 ms children (``cp``, ``true``,
  ``sh -c``, ``sleep``) with receipts (pid, argv). Counted per run: exact argv, unknown argv
  (omitted, counted as ``argv_unknown``), wrong argv, children carrying the parent's image.

    python benchmarks/host_fidelity.py            # n = 30, the default backend (auto)
    python benchmarks/host_fidelity.py -n 10 --backend strace

Needs root for the linux backend (otherwise ``auto`` picks what runs, and the table says which).
"""

from __future__ import annotations

import argparse
import contextlib
import http.server
import json
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
from typing import Any

from bench_support import Gate, Sink, start_host

from otel_bridge.model import LogRecord
from otel_bridge.receivers.host import HostConfig
from otel_bridge.testing import HTTP_CLIENT_WORKLOAD, SHORT_CHILDREN_WORKLOAD, cpu_load

SERVER = """
import os, socket, sys, time
ports_file, n = sys.argv[1], int(sys.argv[2])
for i in range(n):
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen()
    with open(f"{ports_file}.{i}.tmp", "w") as f:
        f.write(str(srv.getsockname()[1]))
    os.rename(f"{ports_file}.{i}.tmp", f"{ports_file}.{i}")
    conn, _ = srv.accept()
    srv.close()
    conn.sendall(b"x")
    time.sleep(0.03)
    conn.close()
"""


ATTACHED = "TCP connects traced with their exact pid since"
TRACER = ["auto"]
"""The host receiver's ``socket_tracer`` (``--socket-tracer``)."""


def traced_since(logs: list[Any]) -> str:
    """The network state saying when the socket tracer attached, or the last state's reason."""
    reasons = [
        str(r.attributes.get("collection.reason"))
        for r in list(logs)
        if isinstance(r, LogRecord)
        and r.event_name == "collection.state"
        and r.attributes.get("collection.name") == "network"
    ]
    attached = [r for r in reasons if ATTACHED in r]
    return attached[0] if attached else (reasons[-1] if reasons else "")


STARTS: list[float] = []
"""Seconds each receiver's ``start`` took (the workload waits for it, released at once)."""
RELEASED: list[int] = []
"""Wall-clock ns at which each workload was released."""


def observe(
    backend: str, argv: list[str], cwd: str, during: Any = None, *, after_attach: bool = False
) -> tuple[list[Any], str]:
    """Run ``argv`` observed by one host receiver; its records and the backend explanation.

    ``after_attach``: release the workload only once the socket tracer attached (at most 60 s;
    a backend without one releases it then and the table says so)."""
    gate = Gate(argv, cwd=cwd)
    sink = Sink()
    began = time.monotonic()
    receiver = start_host(HostConfig(backend=backend, socket_tracer=TRACER[0]), gate.pid, sink)
    STARTS.append(time.monotonic() - began)
    deadline = time.monotonic() + 60
    while after_attach and ATTACHED not in traced_since(sink.logs):
        if time.monotonic() > deadline:
            break
        time.sleep(0.05)
    RELEASED.append(time.time_ns())
    gate.release()
    if during is not None:
        during()
    code = gate.wait()
    receiver.wait_idle()
    receiver.shutdown()
    if code != 0:
        raise SystemExit(f"workload {argv} exited {code}")
    return sink.logs, receiver.explanation


def _named(logs: list[Any], name: str) -> list[dict[str, Any]]:
    return [dict(r.attributes) for r in logs if isinstance(r, LogRecord) and r.event_name == name]


class _PortEcho(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        body = str(self.client_address[1]).encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        return


SHELL_CLIENT = r"""
out=$1 port=$2 n=$3 i=0
while [ "$i" -lt "$n" ]; do
  exec 3<>"/dev/tcp/127.0.0.1/$port"
  printf 'GET / HTTP/1.0

' >&3
  body=$(cat <&3)
  exec 3<&-
  echo "$$ ${body##*$'
'}" >> "$out"
  i=$((i + 1))
done
"""
"""``bash -c`` script: ``OUT PORT N``: N requests through bash's ``/dev/tcp`` from the first
line on (no interpreter start-up before them), a receipt line (pid, client port) each."""


def short_connections(
    backend: str, n: int, work: str, *, after_attach: bool, shell: bool = False
) -> tuple[dict[str, int], str]:
    """Counts of how the ``n`` short requests were recorded, and the tracer's state.

    ``shell``: the requests come from bash at its first line (:data:`SHELL_CLIENT`) rather
    than from Python after its imports."""
    with open(os.path.join(work, "client.py"), "w") as f:
        f.write(HTTP_CLIENT_WORKLOAD)
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _PortEcho)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    port = server.server_address[1]
    out = os.path.join(work, "requests.json")
    with contextlib.suppress(FileNotFoundError):
        os.unlink(out)
    try:
        argv = [sys.executable, "client.py", f"http://127.0.0.1:{port}/", out, str(n)]
        if shell:
            argv = ["bash", "-c", SHELL_CLIENT, "client", out, str(port), str(n)]
        logs, _ = observe(backend, argv, work, after_attach=after_attach)
        why = traced_since(logs)
    finally:
        server.shutdown()
        server.server_close()
    with open(out) as f:
        if shell:
            lines = [line.split() for line in f.read().splitlines()]
            receipts = [{"pid": int(pid), "port": int(p)} for pid, p in lines]
        else:
            receipts = json.load(f)
    connects = [
        (r.time_unix_nano, dict(r.attributes))
        for r in logs
        if isinstance(r, LogRecord)
        and r.event_name == "network.connect"
        and r.attributes.get("network.peer.port") == port
    ]
    attached_at = min(
        (
            r.time_unix_nano
            for r in logs
            if isinstance(r, LogRecord)
            and ATTACHED in str(r.attributes.get("collection.reason", ""))
        ),
        default=None,
    )
    counts = {"seen": 0, "right_pid": 0, "no_pid": 0, "wrong_pid": 0, "duplicates": 0}
    counts["before_attach"] = 0
    released = RELEASED[-1]
    earliest = min((t for t, _ in connects), default=released)
    counts["first_ms"] = (earliest - released) // 10**6
    counts["attach_ms"] = -1 if attached_at is None else (attached_at - released) // 10**6
    for receipt in receipts:
        found = [(t, a) for t, a in connects if a["network.local.port"] == receipt["port"]]
        if not found:
            continue
        counts["seen"] += 1
        counts["duplicates"] += len(found) - 1
        when, first = min(found, key=lambda f: f[0])
        if attached_at is None or when < attached_at:
            counts["before_attach"] += 1
        pid = first.get("process.pid")
        key = "no_pid" if pid is None else "right_pid" if pid == receipt["pid"] else "wrong_pid"
        counts[key] += 1
    return counts, why


def phantoms(backend: str, n: int, work: str) -> int:
    """``network.connect`` records claimed from the accepting server's side."""
    with open(os.path.join(work, "server.py"), "w") as f:
        f.write(SERVER)
    ports_file = os.path.join(work, "ports")
    server_ports: list[int] = []
    client_ports: list[int] = []

    def connect_all() -> None:
        for i in range(n):
            path = f"{ports_file}.{i}"
            deadline = time.monotonic() + 10
            while not os.path.exists(path) and time.monotonic() < deadline:
                time.sleep(0.002)
            with open(path) as f:
                server_ports.append(int(f.read()))
            with socket.create_connection(("127.0.0.1", server_ports[-1])) as client:
                client_ports.append(client.getsockname()[1])
                client.recv(1)

    logs, _ = observe(backend, [sys.executable, "server.py", ports_file, str(n)], work, connect_all)
    return sum(
        1
        for a in _named(logs, "network.connect")
        if a.get("network.local.port") in server_ports or a.get("network.peer.port") in client_ports
    )


def children_worker(backend: str, n: int) -> None:
    """One observe-like run over the children workload; prints its counts as JSON."""
    work = tempfile.mkdtemp(prefix="bench-children-")
    with open(os.path.join(work, "parent.py"), "w") as f:
        f.write(SHORT_CHILDREN_WORKLOAD)
    src = os.path.join(work, "src.txt")
    with open(src, "w") as f:
        f.write("data\n")
    out = os.path.join(work, "children.json")
    logs, _ = observe(backend, [sys.executable, "parent.py", out, src, str(n)], work)
    with open(out) as f:
        receipts = json.load(f)
    parent_argv = [sys.executable, "parent.py", out, src, str(n)]
    counts = {"exact": 0, "unknown": 0, "wrong": 0, "parent_image": 0, "missing": 0}
    for receipt in receipts:
        pid = receipt["pid"]
        recs = [
            a
            for name in ("process.start", "process.exec")
            for a in _named(logs, name)
            if a.get("process.pid") == pid
        ]
        if any(
            list(a.get("process.command_args") or ()) == parent_argv
            or "python" in str(a.get("process.executable.name", ""))
            for a in recs
        ):
            counts["parent_image"] += 1
        execs = _named([r for r in logs if r.attributes.get("process.pid") == pid], "process.exec")
        if not execs:
            counts["missing"] += 1
        elif "process.command_args" not in execs[0]:
            counts["unknown"] += 1
        elif list(execs[0]["process.command_args"]) == receipt["argv"]:
            counts["exact"] += 1
        else:
            counts["wrong"] += 1
    print(json.dumps(counts))


def short_children(backend: str, n: int, runs: int = 3) -> list[dict[str, int]]:
    """``runs`` concurrent children workers; their counts."""
    argv = [sys.executable, __file__, "--worker", "--backend", backend, "-n", str(n)]
    argv += ["--socket-tracer", TRACER[0]]
    procs = [subprocess.Popen(argv, stdout=subprocess.PIPE, text=True) for _ in range(runs)]
    results = []
    for p in procs:
        out, _ = p.communicate(timeout=300)
        if p.returncode != 0:
            raise SystemExit(f"children worker failed ({p.returncode})")
        results.append(json.loads(out.strip().splitlines()[-1]))
    return results


def main() -> None:
    """Run the three checks and print the table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-n", type=int, default=30, help="tries per check (default 30)")
    parser.add_argument("--backend", default="auto", help="host backend (default auto)")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument(
        "--connections-only", action="store_true", help="only the short-connection checks"
    )
    parser.add_argument(
        "--socket-tracer",
        default="auto",
        choices=("auto", "perf", "bpftrace"),
        help="the linux backend's socket tracer (default auto: perf, else bpftrace)",
    )
    args = parser.parse_args()
    TRACER[0] = args.socket_tracer
    if args.worker:
        children_worker(args.backend, args.n)
        return
    n = args.n
    with tempfile.TemporaryDirectory() as work, cpu_load():
        traced, why = short_connections(args.backend, n, work, after_attach=True)
        early, why_early = short_connections(args.backend, n, work, after_attach=False)
        first, _ = short_connections(args.backend, n, work, after_attach=False, shell=True)
        phantom = -1 if args.connections_only else phantoms(args.backend, n, work)
        runs = [] if args.connections_only else short_children(args.backend, n)
    print(f"network state (tracer attached): {why}")
    print(f"network state (released at once): {why_early}")
    load = os.getloadavg()
    print(f"load average {load[0]:.1f} {load[1]:.1f} {load[2]:.1f}; receiver start (workload")
    print(f"  waits for it): {min(STARTS) * 1000:.0f} to {max(STARTS) * 1000:.0f} ms")
    print(f"{'check':<44} {'result':>18}  target")
    for label, conns in (
        ("after the attach", traced),
        ("released at once", early),
        ("bash at its first line", first),
    ):
        print(f"{'1 ms loopback requests, ' + label:<44} {conns['seen']:>15}/{n}  {n}/{n}")
        print(f"{'  made before the tracer attached':<44} {conns['before_attach']:>15}/{n}")
        print(f"{'  with the right pid':<44} {conns['right_pid']:>15}/{n}")
        print(f"{'  without a pid (network namespace)':<44} {conns['no_pid']:>15}/{n}")
        print(f"{'  with a wrong pid':<44} {conns['wrong_pid']:>18}  0")
        print(f"{'  duplicate records':<44} {conns['duplicates']:>18}  0")
        print(f"{'  first request, ms after the release':<44} {conns['first_ms']:>18}")
        print(f"{'  tracer attached, ms after the release':<44} {conns['attach_ms']:>18}")
    print(f"{'phantom connections (server side)':<44} {phantom:>18}  0")
    for i, run in enumerate(runs, 1):
        label = f"5 ms children, run {i}/3: exact argv"
        print(f"{label:<44} {run['exact']:>15}/{n}  {n}/{n}")
        detail = f"unknown {run['unknown']}, wrong {run['wrong']}, missing {run['missing']}"
        print(f"{'  ' + detail:<44} {'mislabels ' + str(run['parent_image']):>18}  0")


if __name__ == "__main__":
    main()
