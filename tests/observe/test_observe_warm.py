"""The warm observe server (issue 11, "observe that feels free"; ``otel_bridge/warm_server.py``,
``docs/observe.md`` "The warm server").

A real server (``observe --warm-server``) serves real ``observe`` clients: a warm run gives the
run directory, report, printed summary and graph of a cold run of the same command (ids, pids,
paths and times aside), passes the workload's stdin and exit status through, refuses a server
of another user, and falls back to cold when the server is gone.
"""

from __future__ import annotations

import ast
import json
import os
import re
import select
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from observe_support import observe_argv
from waiting import Stderr, wait_until

from otel_bridge import warm, warm_server

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="Unix sockets with SO_PEERCRED")

COMMAND = ("sh", "-c", 'cat > in.txt; echo "$0" > out.txt; exit 3', "written")


@dataclass
class Server:
    proc: subprocess.Popen[str]
    env: dict[str, str]
    socket: Path
    stderr: Stderr

    def stop(self) -> None:
        """SIGTERM, and wait for the end."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        self.proc.wait(timeout=30)


def start_server(runtime: Path) -> Server:
    """``observe --warm-server`` with ``XDG_RUNTIME_DIR=runtime``, listening."""
    runtime.mkdir(mode=0o700, exist_ok=True)
    env = {**os.environ, "XDG_RUNTIME_DIR": str(runtime)}
    env.pop(warm.ENV_SWITCH, None)
    proc = subprocess.Popen(
        [sys.executable, "-m", "otel_bridge", "observe", "--warm-server"],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    stderr = Stderr(proc, timeout=120)
    stderr.wait_for("warm observe server on")
    return Server(proc, env, runtime / "otel-bridge" / warm.SOCKET_NAME, stderr)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    started = start_server(tmp_path_factory.mktemp("xdg"))
    yield started
    started.stop()


def observe(
    cwd: Path, env: dict[str, str], *cmd: str, stdin: str = "", extra: tuple[str, ...] = ()
) -> subprocess.CompletedProcess[str]:
    cwd.mkdir(exist_ok=True)
    return subprocess.run(
        observe_argv(cwd, *cmd, extra=extra),
        check=False,
        cwd=cwd,
        env=env,
        input=stdin,
        capture_output=True,
        text=True,
        timeout=300,
    )


def summary_of(cwd: Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((cwd / "run" / "summary.json").read_text())
    return data


def normalized(text: str, cwd: Path, run_id: str) -> str:
    """``text`` without what differs between two runs of one command."""
    text = text.replace(str(cwd), "CWD").replace(run_id, "RUN")
    text = re.sub(r"\bpids? [\d, ]*\d", "pid PID", text)
    text = re.sub(r"\d{4}-\d\d-\d\dT[\d:.]+Z", "TIME", text)
    text = re.sub(r"\d+(\.\d+)?ms", "Nms", text)
    # other processes' TCP connections closed meanwhile (the kernel reports every one of the
    # machine; none is shown to be the command's, none is recorded): the machine's, not the run's
    text = re.sub(r"; unattributed machine connections: \d+ \([^)]*\)", "", text)
    return "\n".join(line for line in text.splitlines() if not line.startswith("  start:"))


def graph_shape(cwd: Path) -> tuple[Counter[tuple[str, str]], Counter[tuple[Any, ...]]]:
    """Nodes by (kind, label) and edges by relation, grade, method and their ends' shapes."""
    graph = json.loads((cwd / "run" / "graph.json").read_text())

    def label(node: dict[str, Any]) -> str:  # pids (a bare one, or in parentheses) aside
        text = str(node.get("label", "")).replace(str(cwd), "CWD")
        return re.sub(r"^\d+$|\(\d+\)", "PID", text)

    shape = {n["id"]: (n["kind"], label(n)) for n in graph["nodes"]}
    nodes = Counter(shape.values())
    edges = Counter(
        (e["relation"], e["grade"], e["method"], shape.get(e["source"]), shape.get(e["target"]))
        for e in graph["edges"]
    )
    return nodes, edges


def test_warm_run_equals_cold_run(server: Server, tmp_path: Path) -> None:
    cold_env = {**server.env, warm.ENV_SWITCH: "0"}
    cold = observe(tmp_path / "cold", cold_env, *COMMAND, stdin="stdin data\n")
    hot = observe(tmp_path / "warm", server.env, *COMMAND, stdin="stdin data\n")
    for result, name in ((cold, "cold"), (hot, "warm")):
        assert result.returncode == 3, result.stderr  # the workload's exit status
        assert (tmp_path / name / "in.txt").read_text() == "stdin data\n"  # its stdin
        assert (tmp_path / name / "out.txt").read_text() == "written\n"
    cold_summary, warm_summary = summary_of(tmp_path / "cold"), summary_of(tmp_path / "warm")
    assert cold_summary["start"]["server"] == "cold"
    assert warm_summary["start"]["server"] == "warm"
    assert cold_summary["start"]["armed"] == warm_summary["start"]["armed"]
    assert "  start:    cold (" in cold.stderr
    assert "  start:    warm server (" in hot.stderr
    assert sorted(os.listdir(tmp_path / "cold" / "run")) == sorted(
        os.listdir(tmp_path / "warm" / "run")
    )
    texts = []
    for name, result in (("cold", cold), ("warm", hot)):
        cwd = tmp_path / name
        run_id = summary_of(cwd)["run"]["id"]
        report = (cwd / "run" / "report.md").read_text()
        texts.append((normalized(report, cwd, run_id), normalized(result.stderr, cwd, run_id)))
    assert texts[0][0] == texts[1][0]  # report.md
    assert texts[0][1] == texts[1][1]  # the printed summary
    assert "`sh -c" in texts[1][0]
    assert "`cat`" in texts[1][0]
    assert graph_shape(tmp_path / "cold") == graph_shape(tmp_path / "warm")
    for key in ("exit_code", "command", "host_backend_name"):
        assert cold_summary[key] == warm_summary[key], key
    assert {
        k: normalized(v, tmp_path, "no run id") for k, v in cold_summary["collection"].items()
    } == {k: normalized(v, tmp_path, "no run id") for k, v in warm_summary["collection"].items()}
    # the server forks from a single thread, and is still single-threaded after serving
    assert len(os.listdir(f"/proc/{server.proc.pid}/task")) == 1


def test_killed_workload_status_passes_through(server: Server, tmp_path: Path) -> None:
    result = observe(tmp_path, server.env, "sh", "-c", "kill -TERM $$", extra=("--no-review",))
    assert result.returncode == 128 + signal.SIGTERM, result.stderr
    assert summary_of(tmp_path)["start"]["server"] == "warm"


def test_a_run_that_comes_during_another_is_served_warm(server: Server, tmp_path: Path) -> None:
    """The child forked ahead serves the first run; a second one that comes while the first
    is under way (no child is waiting yet) is accepted, and forked for, by the server."""
    first_dir, second_dir = tmp_path / "first", tmp_path / "second"
    first_dir.mkdir()
    argv = observe_argv(first_dir, "sh", "-c", "touch started; read line", extra=("--no-review",))
    first = subprocess.Popen(
        argv, cwd=first_dir, env=server.env, stdin=subprocess.PIPE, stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        wait_until((first_dir / "started").exists, 120, "the first run's command")
        second = observe(second_dir, server.env, "true", extra=("--no-review",))
        assert second.returncode == 0, second.stderr
        assert summary_of(second_dir)["start"]["server"] == "warm"
        _, first_err = first.communicate("go\n", timeout=300)
    finally:
        if first.poll() is None:
            first.kill()
    assert first.returncode == 0, first_err
    assert summary_of(first_dir)["start"]["server"] == "warm"


def test_closed_stdin_is_handed_over_as_dev_null(server: Server, tmp_path: Path) -> None:
    argv = observe_argv(tmp_path, "sh", "-c", "exit 5", extra=("--no-review",))
    result = subprocess.run(
        argv,
        check=False,
        cwd=tmp_path,
        env=server.env,
        capture_output=True,
        text=True,
        timeout=300,
        preexec_fn=lambda: os.close(0),  # the client starts with no stdin
    )
    assert result.returncode == 5, result.stderr
    assert summary_of(tmp_path)["start"]["server"] == "warm"


def test_refused_run_directory_is_reported_and_workload_never_runs(
    server: Server, tmp_path: Path
) -> None:
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "keep.txt").write_text("not a run")
    result = observe(tmp_path, server.env, "sh", "-c", "echo ran > ran.txt")
    assert result.returncode == 2
    assert "otel-bridge:" in result.stderr
    assert not (tmp_path / "ran.txt").exists()
    assert (tmp_path / "run" / "keep.txt").read_text() == "not a run"


def test_stale_socket_falls_back_to_cold(tmp_path: Path) -> None:
    stale = start_server(tmp_path / "xdg")
    stale.proc.kill()  # SIGKILL: the socket file stays, nobody answers
    stale.proc.wait(timeout=30)
    assert stale.socket.exists()
    result = observe(tmp_path / "w", stale.env, "true", extra=("--no-review",))
    assert result.returncode == 0, result.stderr
    start = summary_of(tmp_path / "w")["start"]
    assert start["server"] == "cold"
    assert "stale socket" in start["warm_unavailable"]
    assert "  start:    cold (" in result.stderr
    # a new server replaces the stale socket
    fresh = start_server(tmp_path / "xdg")
    try:
        again = observe(tmp_path / "w2", fresh.env, "true", extra=("--no-review",))
        assert again.returncode == 0, again.stderr
        assert summary_of(tmp_path / "w2")["start"]["server"] == "warm"
    finally:
        fresh.stop()


def test_private_directory_is_required(tmp_path: Path) -> None:
    open_dir = tmp_path / "open"
    open_dir.mkdir(mode=0o755)
    open_dir.chmod(0o755)
    with pytest.raises(warm.WarmUnavailableError, match="open to other users"):
        warm.check_private_dir(str(open_dir))
    with pytest.raises(warm.WarmUnavailableError, match="no warm server"):
        warm.check_private_dir(str(tmp_path / "missing"))


NOBODY = 65534


@pytest.mark.skipif(os.geteuid() != 0, reason="runs the client as nobody (needs root)")
@pytest.mark.skipif(shutil.which("setpriv") is None, reason="needs setpriv (util-linux)")
def test_server_of_another_user_is_refused(server: Server) -> None:
    """A client running as nobody, shown root's server through a directory of its own, refuses
    it (SO_PEERCRED) and runs cold (which may fail here for want of packages nobody can read:
    the refusal comes first); the server refuses the client too."""
    home = Path(tempfile.mkdtemp(prefix="warm-nobody-", dir="/tmp"))
    try:
        runtime = home / "xdg"
        (runtime / "otel-bridge").mkdir(parents=True, mode=0o700)
        os.link(server.socket, runtime / "otel-bridge" / warm.SOCKET_NAME)
        server.socket.chmod(0o666)  # the same socket (a hard link): nobody may connect
        for path in (home, runtime, runtime / "otel-bridge"):
            os.chown(path, NOBODY, NOBODY)
            path.chmod(0o700)
        work = home / "work"
        work.mkdir()
        os.chown(work, NOBODY, NOBODY)
        # nobody cannot read root's interpreter prefix, so the package comes from this tree
        tree = str(Path(warm.__file__).resolve().parent.parent)
        env = {**server.env, "XDG_RUNTIME_DIR": str(runtime), "HOME": str(home)}
        env["PYTHONPATH"] = tree
        argv = ["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups"]
        argv += observe_argv(work, "true", extra=("--no-review",))
        result = subprocess.run(
            argv, check=False, cwd=work, env=env, capture_output=True, text=True, timeout=300
        )
        refusal = f"refused a warm server of uid 0 (this user is {NOBODY})"
        assert f"not using the warm server: {refusal}; running cold" in result.stderr
        if result.returncode == 0:  # the cold run needs the dependencies readable by nobody
            start = summary_of(work)["start"]
            assert start["server"] == "cold"
            assert refusal in start["warm_unavailable"]
        server.stderr.wait_for(f"refused a client of uid {NOBODY}")
    finally:
        server.socket.chmod(0o600)
        shutil.rmtree(home, ignore_errors=True)


CLIENT_PROBE = """
import sys
from otel_bridge import cli
code = cli.main(sys.argv[1:])
print(repr((code, sorted(sys.modules))), file=sys.stderr)
"""
NOTHING_PROBE = "import sys; print(repr(sorted(sys.modules)))"
LEAN = {
    "otel_bridge", "otel_bridge.cli", "otel_bridge.errors", "otel_bridge.warm",
    "otel_bridge.launch", "otel_bridge.commands", "otel_bridge.commands.observe_options",
    "_socket", "_signal", "marshal", "select", "stat", "_stat", "struct", "_struct",
}  # fmt: skip
"""What a warm ``observe`` may import beyond what the interpreter has at start."""


def test_warm_client_imports_only_the_lean_modules(server: Server, tmp_path: Path) -> None:
    """The client (the whole ``observe`` process of a warm run) imports no parser, no
    subprocess, no JSON, no collector module: ``cli.main`` hands ``observe`` to the warm client
    before it builds a parser."""
    argv = [sys.executable, "-c", CLIENT_PROBE, "observe", "-o", str(tmp_path / "run")]
    argv += ["--no-progress", "--no-review", "--", "true"]
    proc = subprocess.run(
        argv, check=False, cwd=tmp_path, env=server.env, capture_output=True, text=True, timeout=120
    )
    code, modules = ast.literal_eval(proc.stderr.strip().splitlines()[-1])
    assert code == 0, proc.stderr
    assert summary_of(tmp_path)["start"]["server"] == "warm"
    start = subprocess.run(
        [sys.executable, "-c", NOTHING_PROBE], check=True, env=server.env, capture_output=True,
        text=True, timeout=120,
    )  # fmt: skip
    extra = set(modules) - set(ast.literal_eval(start.stdout))
    assert extra <= LEAN, sorted(extra - LEAN)
    assert {"argparse", "subprocess", "json", "otel_bridge.rundir"}.isdisjoint(extra)


def test_set_overrides_reach_the_warm_run(server: Server, tmp_path: Path) -> None:
    extra = ("--no-review", "--set", "receivers.host.backend=portable")
    result = observe(tmp_path / "ok", server.env, "true", extra=extra)
    assert result.returncode == 0, result.stderr
    summary = summary_of(tmp_path / "ok")
    assert summary["start"]["server"] == "warm"
    assert summary["host_backend_name"] == "portable"
    extra = ("--no-review", "--set", "receivers.host.backend=nothing")
    refused = observe(tmp_path / "bad", server.env, "sh", "-c", "echo ran > ran.txt", extra=extra)
    assert refused.returncode == 2
    assert "receivers.host.backend: must be one of" in refused.stderr
    assert not (tmp_path / "bad" / "ran.txt").exists()
    assert not (tmp_path / "bad" / "run").exists()  # no empty run directory left behind


def test_a_collector_that_cannot_start_leaves_no_run_directory(
    server: Server, tmp_path: Path
) -> None:
    """A ``-c`` file that validates but whose OTLP port is taken: the warm run made the run
    directory before the collector failed; nothing of it is left, and CMD never ran."""
    work = tmp_path / "work"
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        config = tmp_path / "observe.yaml"
        config.write_text(
            "receivers:\n  otlp:\n    protocols:\n      http:\n"
            f"        endpoint: 127.0.0.1:{port}\n  host:\n"
            "exporters:\n  file:\n    path: records.jsonl\n"
            "service:\n  pipelines:\n    evidence:\n      receivers: [otlp, host]\n"
            "      exporters: [file]\n"
        )
        extra = ("--no-review", "-c", str(config))
        refused = observe(work, server.env, "sh", "-c", "echo ran > ran.txt", extra=extra)
    assert refused.returncode == 2, refused.stderr
    assert f"receiver otlp: cannot listen for HTTP on 127.0.0.1:{port}" in refused.stderr
    assert list(work.iterdir()) == []  # no run directory, no records.jsonl, no ran.txt


def test_a_server_of_another_version_is_not_used_and_cmd_runs_once(tmp_path: Path) -> None:
    """The client starts CMD behind its gate while the server answers its hello; an answer it
    cannot use ends that gated CMD unrun, and the cold run runs CMD once."""
    runtime = tmp_path / "xdg"
    (runtime / "otel-bridge").mkdir(parents=True, mode=0o700)
    runtime.chmod(0o700)
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(str(runtime / "otel-bridge" / warm.SOCKET_NAME))
    listener.listen(1)
    other = {"version": "0.0.0", "package": "/elsewhere"}

    def answer() -> None:
        conn, _ = listener.accept()
        with conn:
            warm.receive(conn)
            warm.send(conn, {"hello": other})
            conn.recv(1)  # until the client closes

    thread = threading.Thread(target=answer, daemon=True)
    thread.start()
    env = {**os.environ, "XDG_RUNTIME_DIR": str(runtime)}
    env.pop(warm.ENV_SWITCH, None)
    try:
        result = observe(
            tmp_path / "w", env, "sh", "-c", "echo ran >> ran.txt", extra=("--no-review",)
        )
        thread.join(timeout=60)
    finally:
        listener.close()
    assert result.returncode == 0, result.stderr
    assert "not using the warm server: the warm server runs another otel-bridge" in result.stderr
    assert summary_of(tmp_path / "w")["start"]["server"] == "cold"
    assert (tmp_path / "w" / "ran.txt").read_text() == "ran\n"  # once
    assert os.listdir(runtime / "otel-bridge") == [warm.SOCKET_NAME]  # the gate's FIFO is gone


def test_descriptors_passed_to_observe_do_not_reach_cmd(server: Server, tmp_path: Path) -> None:
    """CMD gets descriptors 0, 1 and 2 only, warm as cold (the cold gate is started with
    ``subprocess``'s ``close_fds``, the warm client's with ``posix_spawn`` close actions)."""
    read_end, write_end = os.pipe()
    script = f"if [ -e /dev/fd/{write_end} ]; then echo open; else echo closed; fi > fd.txt"
    try:
        for name, env in (("cold", {**server.env, warm.ENV_SWITCH: "0"}), ("warm", server.env)):
            cwd = tmp_path / name
            cwd.mkdir()
            result = subprocess.run(
                observe_argv(cwd, "sh", "-c", script, extra=("--no-review",)),
                check=False, cwd=cwd, env=env, pass_fds=(write_end,), capture_output=True,
                text=True, timeout=300,
            )  # fmt: skip
            assert result.returncode == 0, result.stderr
            assert summary_of(cwd)["start"]["server"] == name
            assert (cwd / "fd.txt").read_text() == "closed\n", name
    finally:
        os.close(read_end)
        os.close(write_end)


PRELOAD_PROBE = """
import json, os, sys, threading
from otel_bridge import cli, warm_server
from otel_bridge.commands import observe  # the cold front, which a warm child never imports
fds = sorted(os.listdir("/proc/self/fd"))
warm_server.preload()
after = {"threads": [threading.active_count(), len(os.listdir("/proc/self/task"))],
         "fds": sorted(os.listdir("/proc/self/fd")) == fds}
before = set(sys.modules)
argv = ["observe", "--no-warm", "--no-progress", "-o", sys.argv[1], "--", "true"]
after["code"] = cli.main(argv)
after["imported"] = sorted(set(sys.modules) - before)
print("PROBE " + json.dumps(after))
"""


@pytest.mark.skipif(os.geteuid() != 0, reason="the armed linux run the server preloads for")
def test_preload_leaves_a_run_nothing_to_import(tmp_path: Path) -> None:
    """What the server does before it serves (``preload``: imports and the rehearsal) starts no
    thread, keeps no descriptor or temporary directory, and leaves a run of the bundled
    configuration (the body every warm child runs) nothing to import."""
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_EXPORTER_OTLP_")}
    proc = subprocess.run(  # no destination to forward to: the bundled configuration only
        [sys.executable, "-c", PRELOAD_PROBE, str(tmp_path / "run")],
        check=False, cwd=tmp_path, env={**env, "TMPDIR": str(scratch)},
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    lines = [line for line in proc.stdout.splitlines() if line.startswith("PROBE ")]
    assert lines, proc.stderr[-3000:]
    probe = json.loads(lines[-1].removeprefix("PROBE "))
    assert probe["threads"] == [1, 1]
    assert probe["fds"] is True
    assert probe["code"] == 0, proc.stderr[-3000:]
    assert probe["imported"] == []
    assert list(scratch.iterdir()) == []  # the rehearsal's run directory is gone


CHILDREN_PROBE = """
import json, os, sys
server = sys.argv[1]

def start(pid):  # clock ticks since boot (/proc/PID/stat field 22)
    with open(f"/proc/{pid}/stat", "rb") as f:
        return int(f.read().rpartition(b")")[2].split()[19])

def children(pid):
    kids = []
    for task in os.listdir(f"/proc/{pid}/task"):
        with open(f"/proc/{pid}/task/{task}/children") as f:
            kids += f.read().split()
    return kids

def is_helper(pid):
    with open(f"/proc/{pid}/cmdline", "rb") as f:
        return b"-S" in f.read().split(b"\\0")[1:3]

found = {"runs": [], "helpers": [], "own_helpers": 0}
for pid in children(server):
    if is_helper(pid):
        found["helpers"].append(start(pid))
    else:
        found["runs"].append(start(pid))
        found["own_helpers"] += sum(map(is_helper, children(pid)))
with open("kids.json", "w") as f:
    json.dump(found, f)
"""


def _helpers_since(server: Server, tick: int) -> int:
    """How many of the server's live children are exec image helpers started at ``tick`` or
    later (a zombie has no command line)."""
    count = 0
    for task in os.listdir(f"/proc/{server.proc.pid}/task"):
        for pid in Path(f"/proc/{server.proc.pid}/task/{task}/children").read_text().split():
            try:
                argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
                stat = Path(f"/proc/{pid}/stat").read_bytes()
            except FileNotFoundError:
                continue
            if b"-S" in argv[1:3] and int(stat.rpartition(b")")[2].split()[19]) >= tick:
                count += 1
    return count


@pytest.mark.skipif(os.geteuid() != 0, reason="the spare exec image helper is root's")
@pytest.mark.skipif(
    not Path(f"/proc/{os.getpid()}/task/{os.getpid()}/children").exists(),
    reason="no /proc/PID/task/TID/children in this kernel",
)
def test_next_spare_helper_starts_after_the_run_not_during_it(
    server: Server, tmp_path: Path
) -> None:
    """The server starts the next spare exec image helper, and forks the next run's child
    ahead of its connection, when the run's child has ended: while CMD runs, every helper child
    of the server, and the run's child, are older than the run (the child adopted the spare,
    here one started after the run just before, which it waits for if it is still starting),
    and the run's child spawned no helper; after the run the server has a spare again."""
    before = observe(tmp_path / "before", server.env, "true", extra=("--no-review",))
    assert before.returncode == 0, before.stderr
    wait_until(lambda: _helpers_since(server, 0) >= 1, 60, "the server's next spare helper")
    # the next run's child is forked when the last run's has ended, not when this one starts:
    # wait for it, or under load the fork can fall after the clock below
    wait_until(lambda: bool(_waiting_children(server)), 60, "the next run's child forked ahead")
    cmd = (sys.executable, "-c", CHILDREN_PROBE, str(server.proc.pid))
    launched = _ticks_now()
    result = observe(tmp_path, server.env, *cmd, extra=("--no-review",))
    assert result.returncode == 0, result.stderr
    assert summary_of(tmp_path)["start"]["server"] == "warm"
    found = json.loads((tmp_path / "kids.json").read_text())
    (run,) = found["runs"]
    assert found["helpers"], found
    assert found["own_helpers"] == 0, found
    assert all(helper <= launched for helper in found["helpers"]), (found, launched)
    assert run <= launched, (found, launched)  # forked ahead, waiting for the connection
    wait_until(lambda: _helpers_since(server, 0) >= 1, 60, "a spare again, after the run")


def _ticks_now() -> int:
    """Clock ticks since boot now (the unit and clock of a process's start time in
    ``/proc/PID/stat``)."""
    return int(time.clock_gettime(time.CLOCK_BOOTTIME) * os.sysconf("SC_CLK_TCK"))


def _waiting_children(server: Server) -> list[int]:
    """The server's live children that are not exec image helpers (a zombie has no command
    line): between runs, the child forked ahead of the next one."""
    found = []
    for task in os.listdir(f"/proc/{server.proc.pid}/task"):
        for pid in Path(f"/proc/{server.proc.pid}/task/{task}/children").read_text().split():
            try:
                argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
            except FileNotFoundError:
                continue
            if argv[0] and b"-S" not in argv[1:3]:
                found.append(int(pid))
    return found


def _ended(pid: int) -> bool:
    """Whether ``pid`` is gone or a zombie."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_bytes()
    except FileNotFoundError:
        return True
    return stat.rpartition(b")")[2].split()[0] == b"Z"


@pytest.mark.skipif(
    not Path(f"/proc/{os.getpid()}/task/{os.getpid()}/children").exists(),
    reason="no /proc/PID/task/TID/children in this kernel",
)
def test_the_child_forked_ahead_ends_with_its_server(tmp_path: Path) -> None:
    """Between runs the server has the next run's child waiting on its socket; a server that
    is killed (SIGKILL: it cleans nothing up) leaves no child listening there."""
    started = start_server(tmp_path / "xdg")
    try:
        (ahead,) = wait_until(lambda: _waiting_children(started), 60, "the child forked ahead")
        started.proc.kill()
        started.proc.wait(timeout=30)
        wait_until(lambda: _ended(ahead), 60, "the end of the child forked ahead")
    finally:
        started.stop()


def test_a_run_child_lets_go_of_the_clients_streams_before_it_answers() -> None:
    """The run's child holds the client's descriptors 0 to 2 (a pipe its caller reads, say);
    it points them at ``/dev/null`` before it sends the exit code, so a reader sees the end of
    the output when the client exits, not once the child has been torn down too."""
    out_r, out_w = os.pipe()
    hold_r, hold_w = os.pipe()
    pid = os.fork()
    if pid == 0:  # a run's child holding the client's output
        try:
            os.dup2(out_w, 1)
            os.dup2(out_w, 2)
            for fd in (out_r, out_w, hold_w):
                os.close(fd)
            warm_server._let_go_of_streams()
            os.read(hold_r, 1)  # alive until the test is done
        finally:
            os._exit(0)
    os.close(out_w)
    os.close(hold_r)
    try:
        ready, _, _ = select.select([out_r], [], [], 60)
        assert ready, "the child kept the client's output open"
        assert os.read(out_r, 1) == b""  # the end of the output
        assert os.waitpid(pid, os.WNOHANG) == (0, 0)  # while the child lives
    finally:
        os.close(hold_w)
        os.waitpid(pid, 0)
        os.close(out_r)


FINALIZER_SIGTERM = """
import os, signal, sys
from otel_bridge import warm_server

class Finalized:
    def __del__(self) -> None:
        os.kill(os.getpid(), signal.SIGTERM)  # handled here, inside a finalizer
        for _ in range(10_000):
            pass

def ready(path: str) -> None:
    print(f"serving {path}", file=sys.stderr, flush=True)
    Finalized()

sys.exit(warm_server.serve(ready=ready))
"""


def test_a_sigterm_handled_inside_a_finalizer_still_stops_the_server(tmp_path: Path) -> None:
    """Python drops an exception raised inside a finalizer: a handler that raised there lost
    the signal and the server waited for a second one. The server ends on the first."""
    runtime = tmp_path / "xdg"
    runtime.mkdir(mode=0o700)
    env = {**os.environ, "XDG_RUNTIME_DIR": str(runtime)}
    proc = subprocess.run(
        [sys.executable, "-c", FINALIZER_SIGTERM],
        env=env, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert "serving " in proc.stderr, proc.stderr
    assert proc.returncode == 0, proc.stderr
    assert "Exception ignored" not in proc.stderr
    assert not (runtime / "otel-bridge" / warm.SOCKET_NAME).exists()  # it cleaned up
