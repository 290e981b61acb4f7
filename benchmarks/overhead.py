"""Fixed-work paired overhead: the ExecWeave VII-C protocol against the host receiver.

Workloads do fixed completed work: ``micro`` 64, ``medium`` 4000 and ``long`` 20000 iterations
of write-a-file / read-it-back / hash, plus a fixed child-process schedule (one ``true`` child
every 32 iterations). Each pair runs the same work ``off`` (unobserved) and ``on`` (observed) in
a per-pair randomized order (seeded: deterministic). Each run prints a receipt (iterations,
children, digest); a pair whose receipts differ fails closed (the benchmark exits non-zero).

Two ways of observing (``--mode``):

* ``receiver``: the harness starts the host receiver (writing the raw OS stream as JSON lines,
  like a collector's event file) on the gated workload; elapsed runs from receiver start to
  receiver shutdown with the file flushed. Measures the cost of collection itself.
* ``cli``: the full ``otel-bridge observe --backend B -- python workload.py N`` (collector,
  OTLP receiver, evidence pipeline, graph, run directory, manifest), against running
  ``python workload.py N`` directly. Startup and shutdown are inside elapsed time.

Reported per workload: pairs, median paired overhead ``T_on/T_off - 1`` with P25-P75 and a
deterministic 5000-resample bootstrap 95% CI, median wall times, peak process-tree RSS (sampled
every 10 ms; in ``receiver`` mode the harness process, which hosts the collector, is included),
artifact bytes and event counts. A second line gives the paired CPU-time overhead (user+system
seconds of the workload tree plus the collector, the RSS sampler's own CPU excluded), which is
far less sensitive than elapsed time to other load on a shared machine. A third line gives the
workload's own clock (its loop, timed inside it: no interpreter start, no ``observe`` start or
end): the run off and on, the paired difference, and the part of it spent starting and waiting
for the children.

A third mode, ``fixed``, measures what ``observe`` costs around any command: the time from
starting ``otel-bridge observe`` to the workload's first instruction, and from the workload's
last instruction to ``observe``'s exit. The workload is ``date +%s%N`` (it prints the wall clock
the moment it runs and exits at once); the same command run directly gives the baseline spawn
and exit cost, which is subtracted. CPU seconds of the whole ``observe`` tree are reported too.

    python benchmarks/overhead.py --backend linux --pairs 30,30,10
    python benchmarks/overhead.py --backend portable --poll-interval 20 --mode cli
    python benchmarks/overhead.py --backend linux --mode fixed --runs 20
    python benchmarks/overhead.py --backend linux --mode phases --runs 10   # where it goes

``--warm`` (``fixed`` and ``cli`` modes) starts a warm observe server (``observe
--warm-server``, ``otel_bridge/warm_server.py``) in a private ``XDG_RUNTIME_DIR`` first, and
runs each observed measurement twice in the same randomized order: cold (``--no-warm``) and
warm (through the server). The warm run's CPU is the client's plus what the server's children
(the run's forked child, the spare exec image helper it adopted) used, read from the server's
reaped children times.

    python benchmarks/overhead.py --backend linux --mode fixed --runs 9 --warm
    python benchmarks/overhead.py --backend linux --mode cli --pairs 8,4,0 --warm

``--mode client`` counts the instructions of the warm client (the whole ``observe`` process of a
warm run; cachegrind, ``python -S``) against ``python -S -c pass``:

    python benchmarks/overhead.py --mode client --runs 3

``--venv DIR`` (``fixed`` and ``cli`` modes) measures ``observe`` as a user installs it: this tree
is built into a wheel and installed (its declared dependencies, no extras, no editable finder)
into a fresh ``python -m venv DIR`` (no system site packages); the workload (observed and
unobserved alike), the warm server and every ``observe`` then run on that venv's interpreter and
its ``bin/otel-bridge`` console script, with ``PYTHONPATH``, ``PYTHONHOME``,
``PYTHONPYCACHEPREFIX`` and ``PYTHONDONTWRITEBYTECODE`` removed from their environment (the
install compiled the bytecode beside the modules). Without it, everything runs on this
interpreter with this tree (``python -m otel_bridge``).

    python benchmarks/overhead.py --mode fixed --runs 9 --warm --venv /tmp/ovh-venv
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import re
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass

import psutil
from bench_support import Gate, Sink, bootstrap_median_ci, quantile, start_host

from otel_bridge.receivers.host import HostConfig

WORKLOADS = {"micro": 64, "medium": 4000, "long": 20000}

WORK = r"""
import hashlib, os, sys, time
n = int(sys.argv[1]); root = sys.argv[2]
true = "/bin/true" if os.path.exists("/bin/true") else "/usr/bin/true"
digest = hashlib.sha256(); children = 0; spawning = 0; began = time.monotonic_ns()
for i in range(n):
    path = os.path.join(root, f"f{i % 16}.bin")
    with open(path, "wb") as f:
        f.write(hashlib.sha256(str(i).encode()).digest() * 128)
    with open(path, "rb") as f:
        digest.update(f.read())
    if i % 32 == 0:
        t = time.monotonic_ns()
        os.waitpid(os.posix_spawn(true, ["true"], os.environ), 0)
        spawning += time.monotonic_ns() - t
        children += 1
print(f"clock run={(time.monotonic_ns() - began) / 1e9:.6f} spawn={spawning / 1e9:.6f}")
print(f"receipt iterations={n} children={children} digest={digest.hexdigest()}")
"""
"""The workload. Besides its receipt it prints its own clock: the loop's elapsed time (``run``,
from its first iteration to its last: no interpreter start, no ``observe`` start or end) and
the part of it spent starting and waiting for the children (``spawn``)."""


class TreeRss:
    """Samples the summed RSS of a process tree (plus optional extra pids) every 10 ms."""

    def __init__(self, root: int, extra: tuple[int, ...] = ()) -> None:
        self.peak = 0
        self.cpu = 0.0
        """CPU seconds the sampler itself used (subtracted from the harness's CPU)."""
        self._cpu0 = 0.0
        self._root = root
        self._extra = extra
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        self._cpu0 = time.thread_time()
        while not self._stop.wait(0.01):
            try:
                procs = [psutil.Process(self._root)]
                procs += procs[0].children(recursive=True)
            except psutil.Error:
                procs = []
            procs += [psutil.Process(p) for p in self._extra]
            total = 0
            for p in procs:
                with contextlib.suppress(psutil.Error):
                    total += p.memory_info().rss
            self.peak = max(self.peak, total)
        self.cpu = time.thread_time() - self._cpu0

    def stop(self) -> int:
        """Stop sampling; the peak in bytes."""
        self._stop.set()
        self._thread.join()
        return self.peak


def _cpu(usage: resource.struct_rusage) -> float:
    return usage.ru_utime + usage.ru_stime


def _dir_bytes(path: str) -> int:
    return sum(os.path.getsize(os.path.join(r, f)) for r, _, fs in os.walk(path) for f in fs)


_TREE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_VENV_MARK = ".otel-bridge-overhead"
"""A file in a venv this benchmark made: the only kind of existing directory ``--venv`` replaces."""
_INTERPRETER_VARS = ("PYTHONPATH", "PYTHONHOME", "PYTHONPYCACHEPREFIX", "PYTHONDONTWRITEBYTECODE")


@dataclass(frozen=True, slots=True)
class Install:
    """What the measured commands run on: the interpreter (the workload's), the ``otel-bridge``
    command and their environment (None: this process's)."""

    python: str
    otel_bridge: tuple[str, ...]
    env: dict[str, str] | None = None

    @classmethod
    def here(cls) -> Install:
        """This interpreter and this tree (``python -m otel_bridge``)."""
        return cls(sys.executable, (sys.executable, "-m", "otel_bridge"))

    def environ(self) -> dict[str, str]:
        """The measured commands' environment."""
        return dict(os.environ if self.env is None else self.env)


def make_venv(path: str) -> Install:
    """Build this tree's wheel (from a copy: the build writes nothing here) and install it, with
    its declared dependencies and no extras, into a fresh ``python -m venv`` at ``path``."""
    path = os.path.abspath(path)
    made_here = os.path.exists(os.path.join(path, _VENV_MARK))
    if os.path.exists(path) and os.listdir(path) and not made_here:
        raise SystemExit(f"--venv {path}: not empty and not made by this benchmark")
    with tempfile.TemporaryDirectory(prefix="ovh-wheel-") as work:
        source = os.path.join(work, "src")
        ignore = shutil.ignore_patterns(
            ".git", "build", "dist", "*.egg-info", ".*_cache", "__pycache__", ".hypothesis"
        )
        shutil.copytree(_TREE, source, ignore=ignore)
        dist = os.path.join(work, "dist")
        pip = [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", dist, source]
        subprocess.run(pip, check=True)
        (wheel,) = (os.path.join(dist, n) for n in os.listdir(dist) if n.endswith(".whl"))
        subprocess.run([sys.executable, "-m", "venv", "--clear", path], check=True)
        with open(os.path.join(path, _VENV_MARK), "w", encoding="utf-8") as f:
            f.write("made by benchmarks/overhead.py --venv\n")
        python = os.path.join(path, "bin", "python")
        env = {k: v for k, v in os.environ.items() if k not in _INTERPRETER_VARS}
        pip = [python, "-m", "pip", "install", "-q", wheel]  # not from a tree on PYTHONPATH
        subprocess.run(pip, check=True, env=env, cwd=work)
    otel_bridge = os.path.join(path, "bin", "otel-bridge")
    if not os.path.exists(otel_bridge):
        raise SystemExit(f"--venv {path}: the install made no {otel_bridge}")
    return Install(python, (otel_bridge,), env)


class WarmServer:
    """``observe --warm-server`` in a private runtime directory, for the ``--warm`` runs."""

    def __init__(self, install: Install) -> None:
        self.runtime = tempfile.mkdtemp(prefix="ovh-xdg-")
        self.env = {**install.environ(), "XDG_RUNTIME_DIR": self.runtime}
        self.env.pop("OTEL_BRIDGE_WARM", None)
        argv = [*install.otel_bridge, "observe", "--warm-server"]
        try:
            self.proc = subprocess.Popen(
                argv, env=self.env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True
            )
        except OSError:
            shutil.rmtree(self.runtime, ignore_errors=True)
            raise
        assert self.proc.stderr is not None
        line = self.proc.stderr.readline()  # its first line says it listens
        if "warm observe server on" not in line:
            self.proc.terminate()
            _, rest = self.proc.communicate(timeout=30)
            shutil.rmtree(self.runtime, ignore_errors=True)
            raise RuntimeError(f"the warm server did not start: {line}{rest}")
        self.process = psutil.Process(self.proc.pid)

    def children_cpu(self) -> float:
        """CPU seconds of the server's reaped children so far, once every run's child is reaped
        (the spare helper and the child forked ahead of the next run, both started when the
        last run ended, are the children left)."""
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            if self._settled():
                break
            time.sleep(0.01)  # the server reaps every 0.1 s; poll for that
        times = self.process.cpu_times()
        return float(times.children_user + times.children_system)

    def _settled(self) -> bool:
        """No run's child is left to reap: at most two children, none of them a zombie (a
        zombie is a child until reaped)."""
        try:
            kids = self.process.children()
            return len(kids) <= 2 and all(k.status() != psutil.STATUS_ZOMBIE for k in kids)
        except psutil.NoSuchProcess:  # one ended meanwhile
            return False

    def stop(self) -> None:
        """Stop the server and remove its directory."""
        self.proc.terminate()
        self.proc.communicate(timeout=30)
        shutil.rmtree(self.runtime, ignore_errors=True)


def _observe_argv(
    install: Install, backend: str, out: str, cmd: list[str], warm: WarmServer | None
) -> list[str]:
    """``observe`` of ``cmd`` (cold unless ``warm``)."""
    argv = [*install.otel_bridge, "observe", "--backend", backend, "--no-progress"]
    argv += [] if warm is not None else ["--no-warm"]
    return [*argv, "-o", out, "--", *cmd]


def _run_child(
    argv: list[str],
    cwd: str,
    *,
    env: dict[str, str] | None = None,
    extra: tuple[int, ...] = (),
    quiet: bool = False,
) -> tuple[str, float, int, TreeRss]:
    """Run ``argv`` to its end in ``cwd``: its stdout, the elapsed seconds, the peak RSS of its
    process tree (and of the ``extra`` pids), and the RSS watcher (for its own CPU)."""
    t0 = time.perf_counter()
    proc = subprocess.Popen(
        argv,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL if quiet else None,
        text=True,
        cwd=cwd,
        env=env,
    )
    rss = TreeRss(proc.pid, extra=extra)
    stdout, _ = proc.communicate()
    elapsed = time.perf_counter() - t0
    return stdout, elapsed, rss.stop(), rss


def run_once(
    mode: str,
    on: bool,
    iterations: int,
    backend: str,
    poll: float,
    *,
    warm: WarmServer | None = None,
    install: Install | None = None,
) -> dict[str, object]:
    """One run; returns elapsed seconds, receipt, peak RSS, artifact bytes, events.
    ``warm``: observed through this warm server (``cli`` mode); ``install``: what the workload
    and ``observe`` run on (``cli`` mode; default: this interpreter and tree)."""
    install = install or Install.here()
    work_dir = tempfile.mkdtemp(prefix="ovh-work-")
    out_dir = tempfile.mkdtemp(prefix="ovh-out-")
    cmd = [install.python, "-c", WORK, str(iterations), work_dir]
    events = 0
    self0 = resource.getrusage(resource.RUSAGE_SELF)
    kids0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    try:
        if mode == "cli" and on:
            argv = _observe_argv(install, backend, os.path.join(out_dir, "run"), cmd, warm)
            served0 = warm.children_cpu() if warm is not None else 0.0
            stdout, elapsed, peak, rss = _run_child(
                argv,
                work_dir,
                env=install.env if warm is None else warm.env,
                extra=(warm.proc.pid,) if warm is not None else (),
                quiet=True,
            )
            served = warm.children_cpu() - served0 if warm is not None else 0.0
            artifact = _dir_bytes(os.path.join(out_dir, "run"))
            with open(os.path.join(out_dir, "run", "os.jsonl")) as f:
                events = sum(line.count('"eventName"') for line in f)
        elif mode == "receiver" and on:
            t0 = time.perf_counter()
            gate = Gate(cmd, capture=True)
            sink = Sink(os.path.join(out_dir, "os.jsonl"))
            config = HostConfig(
                backend=backend,
                poll_interval=poll,
                startup_timeout=60,
                watch_paths=[work_dir] if backend == "portable" else [],
            )
            rss = TreeRss(gate.pid, extra=(os.getpid(),))
            receiver = start_host(config, gate.pid, sink)
            gate.release()
            stdout = gate.output()
            gate.wait()
            receiver.shutdown()
            sink.close()
            elapsed = time.perf_counter() - t0
            peak = rss.stop()
            artifact = _dir_bytes(out_dir)
            events = len(sink.logs)
        else:
            stdout, elapsed, peak, rss = _run_child(cmd, work_dir, env=install.env)
            artifact = 0
        if not (mode == "cli" and on):
            served = 0.0
        receipt = next((line for line in stdout.splitlines() if line.startswith("receipt")), "")
        clock = _clock(stdout)
        self1 = resource.getrusage(resource.RUSAGE_SELF)
        kids1 = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu = _cpu(kids1) - _cpu(kids0) + max(0.0, _cpu(self1) - _cpu(self0) - rss.cpu) + served
        return {
            "cpu": cpu,
            "elapsed": elapsed,
            "receipt": receipt,
            "rss": peak,
            "artifact": artifact,
            "events": events,
            "run": clock.get("run", 0.0),
            "spawn": clock.get("spawn", 0.0),
        }
    finally:
        shutil.rmtree(work_dir, ignore_errors=True)
        shutil.rmtree(out_dir, ignore_errors=True)


def _clock(stdout: str) -> dict[str, float]:
    """The workload's own ``clock`` line (:data:`WORK`): ``run`` and ``spawn`` seconds."""
    line = next((x for x in stdout.splitlines() if x.startswith("clock ")), "")
    return {k: float(v) for k, _, v in (w.partition("=") for w in line.split()[1:])}


def fixed_once(
    observed: bool,
    backend: str,
    hold: float = 0.0,
    warm: WarmServer | None = None,
    install: Install | None = None,
) -> tuple[float, float, float]:
    """One ``date +%s%N`` run: (start → first instruction, last instruction → exit, CPU s).

    ``hold`` > 0: the workload prints the clock, sleeps ``hold`` s, and prints it again (the
    first and the last instruction), so work ``observe`` does while it runs is off both ends.
    ``warm``: observed through this warm server; ``install``: what ``observe`` runs on."""
    install = install or Install.here()
    out_dir = tempfile.mkdtemp(prefix="ovh-fixed-")
    date = shutil.which("date") or "/bin/date"
    cmd = [date, "+%s%N"]
    if hold > 0:
        cmd = ["/bin/sh", "-c", f'{date} +%s%N; sleep "$1"; {date} +%s%N', "hold", str(hold)]
    if observed:
        cmd = _observe_argv(install, backend, os.path.join(out_dir, "run"), cmd, warm)
    kids0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    served0 = warm.children_cpu() if warm is not None else 0.0
    try:
        t0 = time.time_ns()
        proc = subprocess.run(
            cmd,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
            check=True,
            env=install.env if warm is None else warm.env,
        )
        t1 = time.time_ns()
    finally:
        shutil.rmtree(out_dir, ignore_errors=True)
    cpu = _cpu(resource.getrusage(resource.RUSAGE_CHILDREN)) - _cpu(kids0)
    if warm is not None:
        cpu += warm.children_cpu() - served0
    lines = proc.stdout.strip().splitlines()
    first, last = int(lines[0]), int(lines[-1])
    return (first - t0) / 1e9, (t1 - last) / 1e9, cpu


def fixed_main(
    runs: int,
    backend: str,
    rng: random.Random,
    hold: float = 0.0,
    warm: WarmServer | None = None,
    *,
    install: Install | None = None,
) -> None:
    """Print observe's fixed cost: medians over ``runs`` paired runs in random order (with
    ``warm``: cold and warm ``observe`` each paired with the same direct run)."""
    variants = ["cold", "warm"] if warm is not None else ["cold"]
    start: dict[str, list[float]] = {v: [] for v in variants}
    end: dict[str, list[float]] = {v: [] for v in variants}
    cpu: dict[str, list[float]] = {v: [] for v in variants}
    for _ in range(runs):
        order = ["off", *variants]
        rng.shuffle(order)
        res = {
            v: fixed_once(v != "off", backend, hold, warm if v == "warm" else None, install)
            for v in order
        }
        s_off, e_off, c_off = res["off"]
        for v in variants:
            start[v].append(res[v][0] - s_off)
            end[v].append(res[v][1] - e_off)
            cpu[v].append(res[v][2] - c_off)
    med = statistics.median
    what = f"a workload of {hold:g} s" if hold > 0 else "date +%s%N"
    print(
        f"fixed cost of observe ({runs} paired runs of {what}, baseline: the command run directly)"
    )
    for v in variants:
        if warm is not None:
            print(f" {v} observe" + (" (through the warm server)" if v == "warm" else ""))
        print(
            f"  start -> workload's first instruction  {med(start[v]):.3f} s "
            f"(P25-P75 {quantile(start[v], 0.25):.3f}-{quantile(start[v], 0.75):.3f})"
        )
        print(
            f"  workload exit -> observe exit           {med(end[v]):.3f} s "
            f"(P25-P75 {quantile(end[v], 0.25):.3f}-{quantile(end[v], 0.75):.3f})"
        )
        total = [a + b for a, b in zip(start[v], end[v], strict=True)]
        print(f"  total                                    {med(total):.3f} s")
        print(f"  CPU of the observe tree                  {med(cpu[v]):.3f} s")


PHASES = (
    (
        "commands.observe",
        "start_early",
        "armed: host sources attached, OTLP port bound, gate opened",
    ),
    ("commands.observe_run", "_prepare", "config + registry (imports the components it names)"),
    ("pipeline", "Collector.start", "collector start (host backend, OTLP servers)"),
    ("commands.observe_run", "start_mux", "protocol mux start"),
    ("commands.observe", "Workload.release", "gate opened (not armed)"),
    ("commands.observe", "Workload.exit_code", "workload runs"),
    ("commands.observe_run", "drain", "drain (process group gone, mux idle)"),
    ("pipeline", "Collector.shutdown", "collector shutdown (host drain, flushes)"),
    ("commands.observe_run", "_finish", "summary, report.md, manifest"),
)
"""Phases in order. A phase's module is patched once the phase before it returned (importing
it then, as ``observe`` itself would next), so each import is counted in the phase that does it."""


PHASE_CHILD = r"""
import importlib, sys, threading, time
spawned = int(sys.argv[1])
marks = [("python start (interpreter, site)", time.time_ns(), time.process_time())]
from otel_bridge import cli
importlib.import_module("otel_bridge.commands.observe")
marks.append(("cli + observe modules imported", time.time_ns(), time.process_time()))
pending = list(PHASES)

def patch_ready():
    for thread in threading.enumerate():  # observe's front imports the body in its own thread
        if thread.name == "observe-warm":
            thread.join()
    for entry in list(pending):
        module_name, attr, label = entry
        name = "otel_bridge." + module_name
        if name not in sys.modules and module_name != "commands.observe":
            importlib.import_module(name)
        pending.remove(entry)
        module = sys.modules[name]
        owner_name, _, fn_name = attr.rpartition(".")
        owner = getattr(module, owner_name) if owner_name else module
        def timed(*a, _f=getattr(owner, fn_name), _label=label, **k):
            result = _f(*a, **k)
            marks.append((_label, time.time_ns(), time.process_time()))
            patch_ready()
            return result
        setattr(owner, fn_name, timed)
        if module_name == "commands.observe" and entry == PHASES[0]:
            return  # the body's modules are imported after the front armed

patch_ready()
cli.main(sys.argv[2:])
previous = (spawned, 0.0)
for label, wall, cpu in marks:
    print(f"PHASE\t{label}\t{(wall - previous[0]) / 1e9:.4f}\t{cpu - previous[1]:.4f}",
          file=sys.stderr)
    previous = (wall, cpu)
"""
"""Runs ``observe`` in a fresh interpreter, timing each phase (wall and process CPU)."""


def phases_main(runs: int, backend: str) -> None:
    """Median wall and CPU per phase of ``observe -- true`` over ``runs`` runs."""
    table: dict[str, list[tuple[float, float]]] = {}
    for _ in range(runs):
        out_dir = tempfile.mkdtemp(prefix="ovh-phase-")
        code = f"PHASES = {PHASES!r}\n{PHASE_CHILD}"
        argv = [sys.executable, "-c", code, str(time.time_ns()), "observe", "--backend", backend]
        argv += ["--no-progress", "--no-forward", "-o", os.path.join(out_dir, "run"), "--", "true"]
        try:
            proc = subprocess.run(argv, capture_output=True, text=True, check=True)
        finally:
            shutil.rmtree(out_dir, ignore_errors=True)
        for line in proc.stderr.splitlines():
            if line.startswith("PHASE\t"):
                _, label, wall_text, cpu_text = line.split("\t")
                table.setdefault(label, []).append((float(wall_text), float(cpu_text)))
    print(f"observe -- true, phases in order ({runs} runs, medians; wall includes waiting)")
    for label, values in table.items():
        wall = statistics.median(v[0] for v in values)
        cpu = statistics.median(v[1] for v in values)
        print(f"  {label:48} wall {wall:7.3f} s   CPU {cpu:7.3f} s")


CONSOLE = "import sys; from otel_bridge.cli import main; sys.exit(main())"
"""What the ``otel-bridge`` console script runs."""


def _instructions(argv: list[str], env: dict[str, str], cwd: str) -> int:
    """Instructions ``argv`` executed (cachegrind ``I refs``, its own process only)."""
    valgrind = ["valgrind", "--tool=cachegrind", "--cache-sim=no", "--trace-children=no"]
    proc = subprocess.run(
        [*valgrind, "--cachegrind-out-file=/dev/null", *argv],
        capture_output=True, text=True, env=env, cwd=cwd, check=False,
    )  # fmt: skip
    match = re.search(r"I\s+refs:\s+([\d,]+)", proc.stderr)
    if match is None:
        raise RuntimeError(f"no instruction count: {proc.stderr[-2000:]}")
    return int(match.group(1).replace(",", ""))


def client_main(runs: int) -> None:
    """The warm client's instructions (``observe -- true`` through a warm server, the console
    script's code on ``python -S``: no ``site``, as close to a plain virtual environment as this
    tree gets), against ``python -S -c pass``; the minimum of ``runs``."""
    if shutil.which("valgrind") is None:
        print("client mode: valgrind is not installed")
        return
    import otel_bridge

    tree = os.path.dirname(os.path.dirname(os.path.abspath(otel_bridge.__file__)))
    warm = WarmServer(Install.here())
    out = tempfile.mkdtemp(prefix="ovh-client-")
    try:
        env = {**warm.env, "PYTHONPATH": tree}
        observe = ["observe", "--no-progress", "--no-review", "-o"]
        counts: dict[str, list[int]] = {"python -S -c pass": [], "warm client": []}
        for i in range(runs):
            counts["python -S -c pass"].append(
                _instructions([sys.executable, "-S", "-c", "pass"], env, out)
            )
            run = os.path.join(out, f"run{i}")
            argv = [sys.executable, "-S", "-c", CONSOLE, *observe, run, "--", "true"]
            counts["warm client"].append(_instructions(argv, env, out))
            with open(os.path.join(run, "summary.json"), encoding="utf-8") as f:
                if json.load(f)["start"]["server"] != "warm":
                    raise RuntimeError("the client ran cold")
        print(f"instructions (cachegrind I refs, min of {runs})")
        for label, values in counts.items():
            print(f"  {label:20} {min(values) / 1e6:8.1f} M")
    finally:
        warm.stop()
        shutil.rmtree(out, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    """Run the pairs and print the summary table."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--backend", default="linux")
    parser.add_argument(
        "--mode", choices=("receiver", "cli", "fixed", "phases", "client"), default="receiver"
    )
    parser.add_argument("--runs", type=int, default=20, help="fixed mode: paired runs")
    parser.add_argument("--pairs", default="30,30,10", help="pairs for micro,medium,long")
    parser.add_argument("--poll-interval", type=float, default=20, help="portable interval, ms")
    parser.add_argument("--workloads", default="micro,medium,long")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument(
        "--hold", type=float, default=0.0, help="fixed mode: the workload lasts this long (s)"
    )
    parser.add_argument(
        "--warm",
        action="store_true",
        help="fixed and cli modes: also observe through a warm server, cold and warm interleaved",
    )
    parser.add_argument(
        "--venv",
        metavar="DIR",
        help="fixed and cli modes: run everything from this tree's wheel in a fresh venv at DIR",
    )
    args = parser.parse_args(argv)
    pairs = dict(zip(WORKLOADS, (int(x) for x in args.pairs.split(",")), strict=True))
    rng = random.Random(args.seed)
    install = Install.here()
    if args.venv and args.mode in ("fixed", "cli"):
        install = make_venv(args.venv)
    print(
        f"backend={args.backend} mode={args.mode} poll={args.poll_interval:g}ms warm={args.warm} "
        f"interpreter={install.python} otel-bridge={' '.join(install.otel_bridge)}"
    )
    if args.mode == "phases":
        phases_main(args.runs, args.backend)
        return 0
    if args.mode == "client":
        client_main(args.runs)
        return 0
    warm = WarmServer(install) if args.warm and args.mode in ("fixed", "cli") else None
    try:
        if args.mode == "fixed":
            fixed_main(args.runs, args.backend, rng, args.hold, warm, install=install)
            return 0
        print(
            f"{'workload':8} {'pairs':>5} {'median ovh':>10} {'P25-P75':>17} "
            f"{'bootstrap 95% CI':>19} {'off wall':>9} {'on wall':>9} {'on RSS':>9} "
            f"{'off RSS':>9} {'artifact':>10} {'events':>7}"
        )
        failed = False
        for name in args.workloads.split(","):
            failed |= _workload_rows(args, name, pairs[name], rng, warm, install=install)
        return 1 if failed else 0
    finally:
        if warm is not None:
            warm.stop()


def _workload_rows(
    args: argparse.Namespace,
    name: str,
    n_pairs: int,
    rng: random.Random,
    warm: WarmServer | None,
    *,
    install: Install,
) -> bool:
    """Run one workload's pairs (off against each observed variant, in one randomized order per
    pair) and print a row per variant; True when equal-work receipts differ."""
    n_iter = WORKLOADS[name]
    variants = ["on", "warm"] if warm is not None else ["on"]
    rows: dict[str, dict[str, list[float]]] = {
        v: {k: [] for k in (*_ROW_KEYS, "run_off", "run_on", "run_d", "spawn_d")} for v in variants
    }
    for _ in range(n_pairs):
        order = ["off", *variants]
        rng.shuffle(order)
        results = {
            v: run_once(
                args.mode,
                v != "off",
                n_iter,
                args.backend,
                args.poll_interval / 1000,
                warm=warm if v == "warm" else None,
                install=install,
            )
            for v in order
        }
        off = results["off"]
        for v in variants:
            on = results[v]
            if not off["receipt"] or off["receipt"] != on["receipt"]:
                print(
                    f"  {name}: equal-work receipts differ: {off['receipt']!r} vs "
                    f"{on['receipt']!r}: FAILED CLOSED"
                )
                return True
            t_off, t_on = float(off["elapsed"]), float(on["elapsed"])  # type: ignore[arg-type]
            c_off, c_on = float(off["cpu"]), float(on["cpu"])  # type: ignore[arg-type]
            row = rows[v]
            row["ratio"].append(t_on / t_off - 1)
            row["cpu"].append(c_on / c_off - 1)
            # the collector's CPU: the pair's extra CPU, per second of observed (on) wall time
            row["cps"].append((c_on - c_off) / t_on)
            row["off"].append(t_off)
            row["on"].append(t_on)
            row["rss_on"].append(float(on["rss"]))  # type: ignore[arg-type]
            row["rss_off"].append(float(off["rss"]))  # type: ignore[arg-type]
            row["art"].append(float(on["artifact"]))  # type: ignore[arg-type]
            row["evs"].append(float(on["events"]))  # type: ignore[arg-type]
            _clock_rows(row, off, on)
    for v in variants:
        label = name if warm is None else f"{name}/{'cold' if v == 'on' else 'warm'}"
        _print_row(label, rows[v])
    return False


_ROW_KEYS = ("ratio", "off", "on", "rss_on", "rss_off", "art", "evs", "cpu", "cps")


def _clock_rows(row: dict[str, list[float]], off: dict[str, object], on: dict[str, object]) -> None:
    """The pair's figures from the workload's own clock: its run off and on, and how much longer
    the run and its child spawns took observed."""
    run_off, run_on = float(off["run"]), float(on["run"])  # type: ignore[arg-type]
    row["run_off"].append(run_off)
    row["run_on"].append(run_on)
    row["run_d"].append(run_on - run_off)
    row["spawn_d"].append(float(on["spawn"]) - float(off["spawn"]))  # type: ignore[arg-type]


def _print_row(name: str, row: dict[str, list[float]]) -> None:
    ratios = row["ratio"]
    if len(ratios) < 2:
        return
    med = statistics.median
    lo, hi = bootstrap_median_ci(ratios)
    mib = 1024 * 1024
    print(
        f"{name:8} {len(ratios):>5} {med(ratios) * 100:>+9.1f}% "
        f"{quantile(ratios, 0.25) * 100:>+7.1f}–{quantile(ratios, 0.75) * 100:>+7.1f}% "
        f"{lo * 100:>+8.1f}–{hi * 100:>+7.1f}% "
        f"{med(row['off']):>8.3f}s {med(row['on']):>8.3f}s "
        f"{med(row['rss_on']) / mib:>7.1f}Mi {med(row['rss_off']) / mib:>7.1f}Mi "
        f"{med(row['art']) / mib:>8.2f}Mi {med(row['evs']):>7.0f}",
        flush=True,
    )
    clo, chi = bootstrap_median_ci(row["cpu"])
    print(
        f"{'':8} {'':>5} CPU (workload tree + collector) paired median "
        f"{med(row['cpu']) * 100:+.1f}% (95% CI {clo * 100:+.1f}–"
        f"{chi * 100:+.1f}%); collector CPU per observed second "
        f"{med(row['cps']):.3f} s/s",
        flush=True,
    )
    if not any(row["run_off"]):
        return
    rlo, rhi = bootstrap_median_ci(row["run_d"])
    slo, shi = bootstrap_median_ci(row["spawn_d"])
    print(
        f"{'':8} {'':>5} the workload's own clock: run {med(row['run_off']):.3f} s off, "
        f"{med(row['run_on']):.3f} s on, paired {med(row['run_d']):+.3f} s "
        f"(95% CI {rlo:+.3f}–{rhi:+.3f}); of it child spawns {med(row['spawn_d']):+.3f} s "
        f"({slo:+.3f}–{shi:+.3f})",
        flush=True,
    )


if __name__ == "__main__":
    sys.exit(main())
