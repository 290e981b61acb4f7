"""The ``linux`` backend's perf socket tracer: no blind window at the start.

``perf_event_open`` on ``sock:inet_sock_set_state`` attaches in milliseconds, inside the
receiver's ``start``, so a connection the workload makes at its very first instruction is
traced with its pid. Real processes throughout, under the suite's background CPU load (two busy
processes): an ``observe`` run whose workload's first act is a 1 ms ``urllib`` request; the
receiver released at once over 15 such requests; the fallback when the kernel refuses perf
events (capabilities dropped) said in the network state. The record decoder is checked against
the running kernel's ``format`` file and against a format with other offsets (none are
hard-coded).
"""

from __future__ import annotations

import json
import os
import shlex
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from cli_support import run_cli
from host_support import (
    Gated,
    finish,
    have,
    needs_root,
    python,
    require_backend,
    require_socket_tracer,
)
from host_support import start_receiver as start
from test_host_short_connections import echo_server, match_receipts
from test_host_socket_trace import network_reasons

from otel_bridge.perfring import TRACEFS, parse_format
from otel_bridge.receivers.host import HostConfig
from otel_bridge.receivers.host.perftrace import (
    ConnectPairing,
    Sample,
    SetStateDecoder,
    StateChange,
    in_time_order,
    tracepoint,
)
from otel_bridge.receivers.host.socktrace import SAMPLED_ONLY
from otel_bridge.testing import HTTP_CLIENT_WORKLOAD, cpu_load

TRIES = 15
PERF = "perf_event_open on sock:inet_sock_set_state"


def require_perf() -> None:
    """Skip with the reason when the linux backend or the perf tracepoint cannot run here."""
    require_socket_tracer("perf")


FORMAT = """name: inet_sock_set_state
ID: 1
format:
\tfield:unsigned short common_type;\toffset:0;\tsize:2;\tsigned:0;
\tfield:int common_pid;\toffset:4;\tsize:4;\tsigned:1;

\tfield:__u16 pad_for_a_newer_kernel;\toffset:8;\tsize:8;\tsigned:0;
\tfield:const void * skaddr;\toffset:16;\tsize:8;\tsigned:0;
\tfield:int oldstate;\toffset:24;\tsize:4;\tsigned:1;
\tfield:int newstate;\toffset:28;\tsize:4;\tsigned:1;
\tfield:__u16 sport;\toffset:32;\tsize:2;\tsigned:0;
\tfield:__u16 dport;\toffset:34;\tsize:2;\tsigned:0;
\tfield:__u16 family;\toffset:36;\tsize:2;\tsigned:0;
\tfield:__u16 protocol;\toffset:38;\tsize:2;\tsigned:0;
\tfield:__u8 saddr[4];\toffset:40;\tsize:4;\tsigned:0;
\tfield:__u8 daddr[4];\toffset:44;\tsize:4;\tsigned:0;
\tfield:__u8 saddr_v6[16];\toffset:48;\tsize:16;\tsigned:0;
\tfield:__u8 daddr_v6[16];\toffset:64;\tsize:16;\tsigned:0;
"""


def record(old: int, new: int, sport: int, skaddr: int = 0xFFFF8880DEADBEEF) -> bytes:
    """A raw record laid out as :data:`FORMAT` says (not as this kernel does)."""
    head = bytes(16) + skaddr.to_bytes(8, sys.byteorder)
    states = old.to_bytes(4, sys.byteorder) + new.to_bytes(4, sys.byteorder)
    ports = b"".join(v.to_bytes(2, sys.byteorder) for v in (sport, 8080, 2, 6))
    v4 = socket.inet_aton("127.0.0.1") + socket.inet_aton("127.0.0.2")
    v6 = socket.inet_pton(socket.AF_INET6, "::ffff:127.0.0.1")
    v6 += socket.inet_pton(socket.AF_INET6, "::ffff:127.0.0.2")
    return head + states + ports + v4 + v6


def change(old: int, new: int, *, protocol: int = 6) -> StateChange:
    """A loopback IPv4 state change of socket 4."""
    v4, v6 = socket.inet_aton("127.0.0.1"), bytes(16)
    return StateChange(4, old, new, protocol, 2, 0, 80, v4, v4, v6, v6)


def test_records_are_read_at_the_offsets_the_format_file_gives() -> None:
    """A format with every field moved decodes as written; a format lacking a field is
    refused with its name; the running kernel's format, when readable, has every field."""
    decoder = SetStateDecoder(parse_format(FORMAT))
    change = decoder.decode(record(7, 2, 45000))
    assert change is not None
    assert (change.skaddr, change.oldstate, change.newstate, change.protocol, change.family) == (
        0xFFFF8880DEADBEEF,
        7,
        2,
        6,
        2,
    )
    assert change.key == ("127.0.0.1", 45000, "127.0.0.2", 8080)
    sport = "sport;\toffset:32;\tsize:2;"
    with pytest.raises(OSError, match="sport has 3 bytes"):
        SetStateDecoder(parse_format(FORMAT.replace(sport, sport.replace("2;", "3;"))))
    with pytest.raises(OSError, match="fields overlap"):
        SetStateDecoder(parse_format(FORMAT.replace(sport, sport.replace("2;", "4;"))))
    assert decoder.decode(record(7, 2, 45000)[:-1]) is None
    with pytest.raises(OSError, match="lacks skaddr"):
        SetStateDecoder(parse_format(FORMAT.replace("skaddr", "sk")))
    with pytest.raises(OSError, match="tracefs not mounted"):
        tracepoint("/nonexistent/tracefs")


def test_pairing_takes_the_pid_from_the_connecting_task() -> None:
    """``CLOSE -> SYN_SENT`` gives the pid and time, ``SYN_SENT -> ESTABLISHED`` (whatever its
    own pid: softirq) the 4-tuple; a refused connect yields nothing and is forgotten;
    ``SYN_RECV -> ESTABLISHED`` is an accepted socket; other protocols are ignored."""
    decoder = SetStateDecoder(parse_format(FORMAT))
    pairing = ConnectPairing()

    def feed(pid: int, at: int, states: tuple[int, int], sport: int, sk: int = 1) -> Any:
        change = decoder.decode(record(*states, sport, sk))
        assert change is not None
        return pairing.feed(pid, at, change)

    assert feed(4242, 100, (7, 2), 0) is None  # connect() in pid 4242, port not chosen yet
    done = feed(0, 150, (2, 1), 45000)  # softirq
    assert (done.initiated, done.tgid, done.connect_ns) == (True, 4242, 100)
    assert done.key == ("127.0.0.1", 45000, "127.0.0.2", 8080)
    assert feed(77, 200, (7, 2), 0, sk=2) is None
    assert feed(0, 210, (2, 7), 45001, sk=2) is None  # refused
    assert feed(0, 220, (2, 1), 45001, sk=2) is None  # no connecting entry left
    accepted = feed(0, 300, (3, 1), 8081, sk=3)
    assert (accepted.initiated, accepted.key[1]) == (False, 8081)
    assert pairing.feed(1, 1, change(7, 2, protocol=132)) is None


@pytest.mark.root
@needs_root
def test_requests_released_at_once_all_carry_their_pid(tmp_path: Path) -> None:
    """Released the moment the receiver started (no wait for any attach), every 1 ms request
    is recorded once with its own pid as a causal syscall connect; the first network state
    already says the perf tracer attached, and in how long."""
    require_perf()
    (tmp_path / "client.py").write_text(HTTP_CLIENT_WORKLOAD)
    receipts, cwd = tmp_path / "receipts.json", str(tmp_path)
    with echo_server() as port, cpu_load():
        url = f"http://127.0.0.1:{port}/"
        work = Gated(f"exec {shlex.quote(python())} client.py {url} {receipts} {TRIES}", cwd)
        try:
            observed = start(HostConfig(backend="linux", files=False), work.pid)
        except BaseException:
            work.kill()
            raise
        work.release()
        assert work.wait(timeout=120) == 0
        observed.receiver.wait_idle()
        observed = finish(observed)
    counts = match_receipts(observed, json.loads(receipts.read_text()), port)
    assert counts == {"pid": TRIES, "unowned": 0, "wrong_pid": 0, "duplicate": 0, "missed": 0}
    first = network_reasons(observed)[0]
    assert "TCP connects traced with their exact pid since" in first
    assert PERF in first
    traced = [c for c in observed.events("network.connect") if c["network.peer.port"] == port]
    assert {c["evidence.attribution"] for c in traced} <= {"syscall", "sampled_process"}


def os_records(run: Path, name: str) -> list[dict[str, Any]]:
    """Attributes of the ``name`` records of a run's ``os.jsonl`` (OTLP/JSON, scalars only)."""
    out = []
    for line in (run / "os.jsonl").read_text().splitlines():
        for rl in json.loads(line)["resourceLogs"]:
            for sl in rl["scopeLogs"]:
                for rec in sl["logRecords"]:
                    if rec.get("eventName") != name:
                        continue
                    attrs: dict[str, Any] = {}
                    for kv in rec.get("attributes", []):
                        value: Any = next(iter(kv["value"].values()), None)
                        attrs[kv["key"]] = int(value) if "intValue" in kv["value"] else value
                    out.append(attrs)
    return out


FIRST_ACT = (
    "import os, sys, urllib.request\n"
    "port = urllib.request.urlopen(sys.argv[1]).read().decode()\n"
    "open(sys.argv[2], 'w').write(f'{os.getpid()} {port}')\n"
)


@pytest.mark.root
@pytest.mark.slow  # a whole observe run (collector, pipeline, run directory): ~10-25 s
@needs_root
def test_observe_traces_a_request_made_at_the_first_instruction(tmp_path: Path) -> None:
    """``otel-bridge observe`` of a workload whose first act is a 1 ms request, under CPU load:
    the run's OS stream has that connection with the workload's pid, traced at the connect;
    the summary's network state names the perf tracer."""
    require_perf()
    (tmp_path / "first.py").write_text(FIRST_ACT)
    receipt, run = tmp_path / "receipt", tmp_path / "run"
    with echo_server() as port, cpu_load():
        argv = ["observe", "-o", str(run), "--no-progress", "--", python(), "first.py"]
        argv += [f"http://127.0.0.1:{port}/", str(receipt)]
        done = run_cli(*argv, cwd=tmp_path, timeout=180)
    assert done.returncode == 0, done.stderr
    pid, client_port = (int(x) for x in receipt.read_text().split())
    found = [c for c in os_records(run, "network.connect") if c["network.peer.port"] == port]
    assert len(found) == 1, found
    assert (found[0]["process.pid"], found[0]["network.local.port"]) == (pid, client_port)
    assert found[0]["network.observed_at"] == "connect"
    summary = json.loads((run / "summary.json").read_text())
    assert PERF in summary["collection"]["network"]


REFUSED = """
import json, sys
sys.path[:0] = sys.argv[1:]
from host_support import Gated, finish, start_receiver
from test_host_socket_trace import network_reasons
from otel_bridge.receivers.host import HostConfig
work = Gated("true", cwd=".")
try:
    observed = start_receiver(HostConfig(backend="linux", files=False), work.pid)
finally:
    work.release()
    work.wait()
print(json.dumps(network_reasons(finish(observed))))
"""


@pytest.mark.root
@needs_root
def test_without_perf_capabilities_the_state_says_the_fallback(tmp_path: Path) -> None:
    """Root without CAP_PERFMON, CAP_SYS_ADMIN and CAP_BPF (``setpriv``): perf events are
    refused, and the network state says so and names what was used instead (bpftrace, which
    cannot attach either, then lineage-only attribution)."""
    require_perf()
    if not have("setpriv"):
        pytest.skip("needs setpriv (util-linux)")
    (tmp_path / "refused.py").write_text(REFUSED)
    here = Path(__file__).parent
    argv = ["setpriv", "--bounding-set=-perfmon,-sys_admin,-bpf", "--inh-caps=-all"]
    argv += [sys.executable, "refused.py", str(here.parent), str(here)]
    began = time.monotonic()
    done = subprocess.run(
        argv, cwd=tmp_path, capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr
    reasons = json.loads(done.stdout.splitlines()[-1])
    if not os.path.ismount(TRACEFS):  # the private mount needs CAP_SYS_ADMIN, dropped too
        assert "a private tracefs mount was refused (unshare" in reasons[0], reasons
        assert "lineage only (no socket tracer: perf:" in reasons[0], reasons
        assert SAMPLED_ONLY in reasons[0], reasons
        return
    assert "perf: perf_event_open refused (needs root or CAP_PERFMON" in reasons[0], reasons
    if have("bpftrace"):
        assert "once bpftrace" in reasons[0], reasons
        assert "lineage only" in reasons[-1], reasons
        assert "perf tracer unavailable: perf: perf_event_open refused" in reasons[-1]
    else:
        assert "lineage only (no socket tracer: perf:" in reasons[0], reasons
        assert SAMPLED_ONLY in reasons[0], reasons
    assert time.monotonic() - began < 120


PRIVATE = """
import json, pathlib
from otel_bridge.perfring import read_private_tracepoint
before = pathlib.Path("/proc/self/mountinfo").read_text()
event_id, fields = read_private_tracepoint()
after = pathlib.Path("/proc/self/mountinfo").read_text()
print(json.dumps([event_id, sorted(fields), before == after]))
"""


@pytest.mark.root
@needs_root
def test_the_tracepoint_is_read_from_a_private_tracefs_mount() -> None:
    """Root, whether or not tracefs is mounted (CI mounts it; this machine may not): the
    tracepoint's id and format are read from a tracefs mounted in a mount namespace of a thread
    of its own, and the process's mount table is the same afterwards (nobody else sees it)."""
    require_backend("linux")
    mounted = os.path.ismount(TRACEFS)
    done = subprocess.run(
        [sys.executable, "-c", PRIVATE], capture_output=True, text=True, timeout=60, check=False
    )
    if done.returncode and "private" in done.stderr:
        pytest.skip(f"no private tracefs mount here: {done.stderr.strip().splitlines()[-1]}")
    assert done.returncode == 0, done.stderr
    event_id, fields, unchanged = json.loads(done.stdout)
    assert unchanged, "the mount table changed"
    assert {"skaddr", "oldstate", "newstate", "sport", "dport"} <= set(fields)
    assert os.path.ismount(TRACEFS) is mounted
    if mounted:
        assert event_id == tracepoint()[0]


def connect_many(n: int) -> list[tuple[str, int, str, int]]:
    """``n`` loopback TCP connections from this process, accepted and closed; their 4-tuples."""
    keys = []
    with socket.create_server(("127.0.0.1", 0)) as server:
        port = server.getsockname()[1]
        for _ in range(n):
            with socket.create_connection(("127.0.0.1", port)) as client:
                accepted, _ = server.accept()
                accepted.close()
                keys.append(("127.0.0.1", client.getsockname()[1], "127.0.0.1", port))
    return keys


def tracer_over(pages: int) -> tuple[Any, Any, list[str]]:
    """A perf tracer (not started: :meth:`stop` reads the rings) whose lineage is this process."""
    from test_host_interpreters import Harness

    from otel_bridge.receivers.host.direction import DirectionRule
    from otel_bridge.receivers.host.events import SAMPLED
    from otel_bridge.receivers.host.netscan import SocketScanner
    from otel_bridge.receivers.host.perftrace import PerfSocketTracer

    h = Harness()
    scanner = SocketScanner(h.ctx, attribution=SAMPLED, rule=DirectionRule((32768, 60999)))
    states: list[str] = []
    me = os.getpid()
    tracer = PerfSocketTracer(
        h.ctx, scanner, lambda pid, _ns: pid == me, states.append, ring_pages=pages
    )
    return h, tracer, states


@pytest.mark.root
@needs_root
def test_connects_read_from_the_rings_carry_this_process_pid() -> None:
    """Through the real rings: each of 20 loopback connects made after the constructor
    returned is recorded once with this process's pid and the connect's 4-tuple; the
    accepted ends are not connects; nothing was lost."""
    require_perf()
    h, tracer, states = tracer_over(64)
    try:
        keys = connect_many(20)
    finally:
        tracer.stop()
    connects = {
        (
            c["network.local.address"],
            c["network.local.port"],
            c["network.peer.address"],
            c["network.peer.port"],
        ): c
        for c in h.named("network.connect")
        if c["network.peer.port"] == keys[0][3]
    }
    assert sorted(connects) == sorted(keys)
    assert {c["process.pid"] for c in connects.values()} == {os.getpid()}
    assert all(tracer.status(k) is True for k in keys)
    assert (tracer.lost, states) == (0, [])


@pytest.mark.root
@needs_root
def test_a_full_ring_is_counted_and_said_never_silent() -> None:
    """One data page per CPU and no reader while 200 connections are made: the kernel drops
    samples (PERF_RECORD_LOST); the number is counted and the state says it; what was kept is
    still recorded with this process's pid, never another's."""
    require_perf()
    h, tracer, states = tracer_over(1)
    try:
        connect_many(200)
    finally:
        tracer.stop()
    assert tracer.lost > 0
    assert h.telemetry.counters()["receiver.host.socktrace.lost"] == tracer.lost
    assert f"the socket tracer lost {tracer.lost} kernel reports so far" in states[-1]
    assert {c["process.pid"] for c in h.named("network.connect")} <= {os.getpid()}


def test_samples_are_ordered_across_cpus_and_young_ones_wait() -> None:
    """Samples of two CPUs come out in time order; those younger than the cutoff wait."""
    cpu1 = [Sample(t, 1, i, 10, change(7, 2)) for i, t in enumerate((30, 10))]
    cpu0 = [Sample(t, 0, 5 + i, 10, change(7, 2)) for i, t in enumerate((20, 40))]
    ready, rest = in_time_order(cpu1 + cpu0, 30)
    assert [s.time_ns for s in ready] == [10, 20, 30]
    assert [s.time_ns for s in rest] == [40]
    assert [s.time_ns for s in in_time_order(rest, None)[0]] == [40]
