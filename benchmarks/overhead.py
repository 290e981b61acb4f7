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
far less sensitive than elapsed time to other load on a shared machine.

A third mode, ``fixed``, measures what ``observe`` costs around any command: the time from
starting ``otel-bridge observe`` to the workload's first instruction, and from the workload's
last instruction to ``observe``'s exit. The workload is ``date +%s%N`` (it prints the wall clock
the moment it runs and exits at once); the same command run directly gives the baseline spawn
and exit cost, which is subtracted. CPU seconds of the whole ``observe`` tree are reported too.

    python benchmarks/overhead.py --backend linux --pairs 30,30,10
    python benchmarks/overhead.py --backend portable --poll-interval 20 --mode cli
    python benchmarks/overhead.py --backend linux --mode fixed --runs 20
    python benchmarks/overhead.py --backend linux --mode phases --runs 10   # where it goes
"""

from __future__ import annotations

import argparse
import contextlib
import os
import random
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time

import psutil
from bench_support import Gate, Sink, bootstrap_median_ci, quantile, start_host

from otel_bridge.receivers.host import HostConfig

WORKLOADS = {"micro": 64, "medium": 4000, "long": 20000}

WORK = r"""
import hashlib, os, sys
n = int(sys.argv[1]); root = sys.argv[2]
true = "/bin/true" if os.path.exists("/bin/true") else "/usr/bin/true"
digest = hashlib.sha256(); children = 0
for i in range(n):
    path = os.path.join(root, f"f{i % 16}.bin")
    with open(path, "wb") as f:
        f.write(hashlib.sha256(str(i).encode()).digest() * 128)
    with open(path, "rb") as f:
        digest.update(f.read())
    if i % 32 == 0:
        os.waitpid(os.posix_spawn(true, ["true"], os.environ), 0)
        children += 1
print(f"receipt iterations={n} children={children} digest={digest.hexdigest()}")
"""


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


def run_once(mode: str, on: bool, iterations: int, backend: str, poll: float) -> dict[str, object]:
    """One run; returns elapsed seconds, receipt, peak RSS, artifact bytes, events."""
    work_dir = tempfile.mkdtemp(prefix="ovh-work-")
    out_dir = tempfile.mkdtemp(prefix="ovh-out-")
    cmd = [sys.executable, "-c", WORK, str(iterations), work_dir]
    events = 0
    self0 = resource.getrusage(resource.RUSAGE_SELF)
    kids0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    try:
        if mode == "cli" and on:
            argv = [
                sys.executable,
                "-m",
                "otel_bridge",
                "observe",
                "--backend",
                backend,
                "--no-progress",
                "-o",
                os.path.join(out_dir, "run"),
                "--",
                *cmd,
            ]
            t0 = time.perf_counter()
            proc = subprocess.Popen(
                argv, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, cwd=work_dir
            )
            rss = TreeRss(proc.pid)
            stdout, _ = proc.communicate()
            elapsed = time.perf_counter() - t0
            peak = rss.stop()
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
            t0 = time.perf_counter()
            proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True, cwd=work_dir)
            rss = TreeRss(proc.pid)
            stdout, _ = proc.communicate()
            elapsed = time.perf_counter() - t0
            peak = rss.stop()
            artifact = 0
        receipt = next((line for line in stdout.splitlines() if line.startswith("receipt")), "")
        self1 = resource.getrusage(resource.RUSAGE_SELF)
        kids1 = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu = _cpu(kids1) - _cpu(kids0) + max(0.0, _cpu(self1) - _cpu(self0) - rss.cpu)
        return {
            "cpu": cpu,
            "elapsed": elapsed,
            "receipt": receipt,
            "rss": peak,
            "artifact": artifact,
            "events": events,
        }
    finally:
        shutil.rmtree(work_dir, ignore_errors=True)
        shutil.rmtree(out_dir, ignore_errors=True)


def fixed_once(observed: bool, backend: str, hold: float = 0.0) -> tuple[float, float, float]:
    """One ``date +%s%N`` run: (start → first instruction, last instruction → exit, CPU s).

    ``hold`` > 0: the workload prints the clock, sleeps ``hold`` s, and prints it again (the
    first and the last instruction), so work ``observe`` does while it runs is off both ends."""
    out_dir = tempfile.mkdtemp(prefix="ovh-fixed-")
    date = shutil.which("date") or "/bin/date"
    cmd = [date, "+%s%N"]
    if hold > 0:
        cmd = ["/bin/sh", "-c", f'{date} +%s%N; sleep "$1"; {date} +%s%N', "hold", str(hold)]
    if observed:
        cmd = [
            sys.executable,
            "-m",
            "otel_bridge",
            "observe",
            "--backend",
            backend,
            "--no-progress",
            "-o",
            os.path.join(out_dir, "run"),
            "--",
            *cmd,
        ]
    kids0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    try:
        t0 = time.time_ns()
        proc = subprocess.run(
            cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, check=True
        )
        t1 = time.time_ns()
    finally:
        shutil.rmtree(out_dir, ignore_errors=True)
    cpu = _cpu(resource.getrusage(resource.RUSAGE_CHILDREN)) - _cpu(kids0)
    lines = proc.stdout.strip().splitlines()
    first, last = int(lines[0]), int(lines[-1])
    return (first - t0) / 1e9, (t1 - last) / 1e9, cpu


def fixed_main(runs: int, backend: str, rng: random.Random, hold: float = 0.0) -> None:
    """Print observe's fixed cost: medians over ``runs`` paired runs in random order."""
    start, end, cpu = [], [], []
    for _ in range(runs):
        order = [False, True]
        rng.shuffle(order)
        res = {observed: fixed_once(observed, backend, hold) for observed in order}
        (s_on, e_on, c_on), (s_off, e_off, c_off) = res[True], res[False]
        start.append(s_on - s_off)
        end.append(e_on - e_off)
        cpu.append(c_on - c_off)
    med = statistics.median
    what = f"a workload of {hold:g} s" if hold > 0 else "date +%s%N"
    print(
        f"fixed cost of observe ({runs} paired runs of {what}, baseline: the command run directly)"
    )
    print(
        f"  start -> workload's first instruction  {med(start):.3f} s "
        f"(P25-P75 {quantile(start, 0.25):.3f}-{quantile(start, 0.75):.3f})"
    )
    print(
        f"  workload exit -> observe exit           {med(end):.3f} s "
        f"(P25-P75 {quantile(end, 0.25):.3f}-{quantile(end, 0.75):.3f})"
    )
    total = [a + b for a, b in zip(start, end, strict=True)]
    print(f"  total                                    {med(total):.3f} s")
    print(f"  CPU of the observe tree                  {med(cpu):.3f} s")


PHASES = (
    (
        "commands.observe",
        "start_early",
        "armed: host sources attached, OTLP port bound, gate opened",
    ),
    ("commands._observe_run", "_prepare", "config + registry (imports the components it names)"),
    ("pipeline", "Collector.start", "collector start (host backend, OTLP servers)"),
    ("commands._observe_run", "start_mux", "protocol mux start"),
    ("commands.observe", "Workload.release", "gate opened (not armed)"),
    ("commands.observe", "Workload.exit_code", "workload runs"),
    ("commands._observe_run", "drain", "drain (process group gone, mux idle)"),
    ("pipeline", "Collector.shutdown", "collector shutdown (host drain, flushes)"),
    ("commands._observe_run", "_finish", "summary, report.md, manifest"),
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


def main(argv: list[str] | None = None) -> int:
    """Run the pairs and print the summary table."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--backend", default="linux")
    parser.add_argument(
        "--mode", choices=("receiver", "cli", "fixed", "phases"), default="receiver"
    )
    parser.add_argument("--runs", type=int, default=20, help="fixed mode: paired runs")
    parser.add_argument("--pairs", default="30,30,10", help="pairs for micro,medium,long")
    parser.add_argument("--poll-interval", type=float, default=20, help="portable interval, ms")
    parser.add_argument("--workloads", default="micro,medium,long")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument(
        "--hold", type=float, default=0.0, help="fixed mode: the workload lasts this long (s)"
    )
    args = parser.parse_args(argv)
    pairs = dict(zip(WORKLOADS, (int(x) for x in args.pairs.split(",")), strict=True))
    rng = random.Random(args.seed)
    print(f"backend={args.backend} mode={args.mode} poll={args.poll_interval:g}ms")
    if args.mode == "fixed":
        fixed_main(args.runs, args.backend, rng, args.hold)
        return 0
    if args.mode == "phases":
        phases_main(args.runs, args.backend)
        return 0
    print(
        f"{'workload':8} {'pairs':>5} {'median ovh':>10} {'P25-P75':>17} "
        f"{'bootstrap 95% CI':>19} {'off wall':>9} {'on wall':>9} {'on RSS':>9} {'off RSS':>9} "
        f"{'artifact':>10} {'events':>7}"
    )
    failed = False
    for name in args.workloads.split(","):
        n_iter = WORKLOADS[name]
        ratios, offs, ons, rss_on, rss_off, art, evs = [], [], [], [], [], [], []
        cpu_ratios: list[float] = []
        cpu_per_s: list[float] = []
        for _ in range(pairs[name]):
            order = [False, True]
            rng.shuffle(order)
            results = {
                on: run_once(args.mode, on, n_iter, args.backend, args.poll_interval / 1000)
                for on in order
            }
            off, on = results[False], results[True]
            if not off["receipt"] or off["receipt"] != on["receipt"]:
                print(
                    f"  {name}: equal-work receipts differ: {off['receipt']!r} vs "
                    f"{on['receipt']!r}: FAILED CLOSED"
                )
                failed = True
                break
            t_off, t_on = float(off["elapsed"]), float(on["elapsed"])  # type: ignore[arg-type]
            ratios.append(t_on / t_off - 1)
            cpu_ratios.append(float(on["cpu"]) / float(off["cpu"]) - 1)  # type: ignore[arg-type]
            # the collector's CPU: the pair's extra CPU, per second of observed (on) wall time
            cpu_per_s.append((float(on["cpu"]) - float(off["cpu"])) / t_on)  # type: ignore[arg-type]
            offs.append(t_off)
            ons.append(t_on)
            rss_on.append(int(on["rss"]))  # type: ignore[call-overload]
            rss_off.append(int(off["rss"]))  # type: ignore[call-overload]
            art.append(int(on["artifact"]))  # type: ignore[call-overload]
            evs.append(int(on["events"]))  # type: ignore[call-overload]
        if len(ratios) < 2:
            continue
        lo, hi = bootstrap_median_ci(ratios)
        mib = 1024 * 1024
        print(
            f"{name:8} {len(ratios):>5} {statistics.median(ratios) * 100:>+9.1f}% "
            f"{quantile(ratios, 0.25) * 100:>+7.1f}–{quantile(ratios, 0.75) * 100:>+7.1f}% "
            f"{lo * 100:>+8.1f}–{hi * 100:>+7.1f}% "
            f"{statistics.median(offs):>8.3f}s {statistics.median(ons):>8.3f}s "
            f"{statistics.median(rss_on) / mib:>7.1f}Mi {statistics.median(rss_off) / mib:>7.1f}Mi "
            f"{statistics.median(art) / mib:>8.2f}Mi {statistics.median(evs):>7.0f}",
            flush=True,
        )
        clo, chi = bootstrap_median_ci(cpu_ratios)
        print(
            f"{'':8} {'':>5} CPU (workload tree + collector) paired median "
            f"{statistics.median(cpu_ratios) * 100:+.1f}% (95% CI {clo * 100:+.1f}–"
            f"{chi * 100:+.1f}%); collector CPU per observed second "
            f"{statistics.median(cpu_per_s):.3f} s/s",
            flush=True,
        )
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
