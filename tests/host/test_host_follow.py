"""A standing host receiver: the interest registry, following reported processes, selectors."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from cli_support import run_cli
from host_support import Gated, Observed, backend_reason, finish, python
from waiting import wait_until

from otel_bridge.component import CreateSettings, Host, ProcessInterest, ProcessInterests
from otel_bridge.identity import host_id, iso_ms, linux_start_time_ms
from otel_bridge.model import Batch, ProcessFacts, RelationKind, Resource
from otel_bridge.pipeline import publish_span_processes
from otel_bridge.processors.normalize import Normalizer
from otel_bridge.receivers.host import HostConfig, HostReceiver
from otel_bridge.testing import RecordingConsumer, make_span


def test_interests_are_published_once_and_replayed_to_late_subscribers() -> None:
    """A process is published once; a subscriber first gets what was published before."""
    interests = ProcessInterests()
    wanted_before = interests.wanted
    first = ProcessInterest(pid=10, host_id="h", start_time_ms=5)
    interests.publish(first)
    got: list[ProcessInterest] = []
    unsubscribe = interests.subscribe(got.append)
    assert (wanted_before, interests.wanted) == (False, True)
    interests.publish(ProcessInterest(pid=10, host_id="h", start_time_ms=5, source="again"))
    interests.publish(ProcessInterest(pid=10, host_id="h", start_time_ms=6))  # a recycled pid
    assert [(i.pid, i.start_time_ms) for i in got] == [(10, 5), (10, 6)]
    unsubscribe()
    interests.publish(ProcessInterest(pid=11))
    assert len(got) == 2


def test_span_resources_are_published_with_pid_host_and_start() -> None:
    """Each distinct span resource is published: its process.pid, or 0 when it states none."""
    agent = Resource(
        attributes={
            "process.pid": 4242,
            "host.id": "machine",
            "process.creation.time": "2026-01-02T03:04:05.678Z",
        }
    )
    bare = Resource(attributes={"process.pid": "77"})
    recycled = Resource(attributes={"process.pid": "77", "service.instance.id": "second"})
    none = Resource(attributes={"service.name": "no pid"})
    batch = Batch(
        spans=(
            make_span(0, resource=agent),
            make_span(1, resource=agent),
            make_span(2, resource=bare),
            make_span(3, resource=none),
            make_span(4, resource=recycled),
        )
    )
    interests = ProcessInterests()
    got: list[ProcessInterest] = []
    interests.subscribe(got.append)
    publish_span_processes(batch, interests, "otlp")
    publish_span_processes(batch, interests, "otlp")
    assert [(i.pid, i.host_id, i.start_time_ms, i.instance_id, i.source) for i in got] == [
        (4242, "machine", 1767323045678, "", "otlp"),
        (77, "", None, "", "otlp"),
        (0, "", None, "", "otlp"),  # no pid: published as pid 0, said unknown by the receiver
        (77, "", None, "second", "otlp"),
    ]
    assert got[2].service == "no pid"


def _standing(config: HostConfig) -> Observed:
    sink = RecordingConsumer()
    receiver = HostReceiver(CreateSettings(id="host"), config, sink)
    host = Host()
    receiver.start(host)
    return Observed(receiver, sink, host)


def _lineage_states(observed: Observed) -> list[dict[str, object]]:
    return [a for a in observed.events("collection.state") if a["collection.name"] == "lineage"]


@pytest.mark.parametrize("backend", ["linux", "strace", "portable"])
def test_a_reported_process_is_followed_from_its_report(tmp_path: Path, backend: str) -> None:
    """A process published as reporting telemetry is followed, with its children, from then
    on: its later child, file write and exit are recorded, and a coverage record says its
    earlier activity is unknown."""
    reason = backend_reason(backend)
    if reason:
        pytest.skip(reason)
    config = HostConfig(backend=backend, watch_paths=[str(tmp_path)])
    observed = _standing(config)
    work = Gated("echo followed > out.txt; /bin/true", cwd=str(tmp_path))
    try:
        start = linux_start_time_ms(work.pid)
        observed.host.interests.publish(
            ProcessInterest(pid=work.pid, host_id=host_id(), start_time_ms=start, source="test")
        )
        ctx = observed.receiver.context
        assert ctx is not None
        wait_until(lambda: work.pid in ctx.lineage, 20, "the reported pid in the lineage")
        work.release()
        assert work.wait() == 0
        observed.wait_for("process.exit", work.pid)
    finally:
        work.kill()
        finish(observed)
    (state,) = _lineage_states(observed)
    assert state["collection.state"] == "degraded"
    assert state["process.pid"] == work.pid
    assert state["process.creation.time"] == iso_ms(start or 0)
    assert "earlier process, file and network activity" in str(state["collection.reason"])
    assert observed.for_pid("process.start", work.pid)
    files = [a for a in observed.logs if str(a.attributes.get("file.path", "")).endswith("out.txt")]
    assert files, [r.event_name for r in observed.logs]
    if backend != "portable":  # a 1 ms child is below the sampling period
        children = [
            a for a in observed.events("process.exec") if a.get("process.parent_pid") == work.pid
        ]
        assert children, observed.events("process.exec")
    status = observed.receiver.status()
    assert status.collections["lineage"].startswith("degraded: 1 process(es) followed")


def test_interests_not_followed_are_counted_and_said(tmp_path: Path) -> None:
    """Another host's pid and a recycled pid are not followed; a gone one is reported unknown."""
    observed = _standing(HostConfig(backend="portable"))
    work = Gated("true", cwd=str(tmp_path))
    gone = subprocess.Popen(["true"])
    gone.wait()
    try:
        start = linux_start_time_ms(work.pid) or 0
        publish = observed.host.interests.publish
        publish(ProcessInterest(pid=work.pid, host_id="another-machine"))
        publish(ProcessInterest(pid=work.pid, host_id=host_id(), start_time_ms=start - 60_000))
        publish(ProcessInterest(pid=gone.pid, host_id=host_id(), source="otlp"))
        telemetry = observed.host.telemetry

        def skipped() -> int:
            return sum(telemetry.by_label("follow.skipped", kind="receiver").values())

        wait_until(lambda: skipped() == 3, 10, "three skipped interests")
    finally:
        work.release()
        work.wait()
        finish(observed)
    by_reason = telemetry.by_label("follow.skipped", kind="receiver")
    assert by_reason == {"other_host": 1, "start_mismatch": 1, "gone": 1}
    ctx = observed.receiver.context
    assert ctx is not None
    assert ctx.lineage.snapshot() == []
    (state,) = _lineage_states(observed)
    assert state["collection.state"] == "unavailable"
    assert state["process.pid"] == gone.pid
    assert "had exited before it could be followed" in str(state["collection.reason"])


def test_observe_mode_does_not_follow_telemetry(tmp_path: Path) -> None:
    """With a root pid (observe), spans from processes outside the lineage change nothing."""
    work = Gated("true", cwd=str(tmp_path))
    other = Gated("true", cwd=str(tmp_path))
    sink = RecordingConsumer()
    receiver = HostReceiver(CreateSettings(id="host"), HostConfig(backend="portable"), sink)
    receiver.set_root_pid(work.pid)
    host = Host()
    try:
        receiver.start(host)
        assert not host.interests.wanted
    finally:
        for w in (work, other):
            w.release()
            w.wait()
        receiver.shutdown()
    assert other.pid not in {r.attributes.get("process.pid") for r in sink.logs}


def _marker_process(tmp_path: Path, marker: str) -> subprocess.Popen[bytes]:
    """A python child whose command line carries ``marker``; waits on stdin, then writes."""
    code = "import sys; sys.stdin.readline(); open('selected.txt', 'w').write('x')"
    return subprocess.Popen([python(), "-c", code, marker], cwd=tmp_path, stdin=subprocess.PIPE)


def _release(proc: subprocess.Popen[bytes]) -> None:
    assert proc.stdin is not None
    proc.stdin.write(b"go\n")
    proc.stdin.close()
    assert proc.wait(timeout=20) == 0


def test_command_selector_follows_a_matching_process(tmp_path: Path) -> None:
    """A ``command`` regex selects a running process (not the collector) from the scan on."""
    marker = f"standing-marker-{os.getpid()}"
    proc = _marker_process(tmp_path, marker)
    config = HostConfig(backend="auto", command=[rf"standing-marker-{os.getpid()}\b"])
    config.selector_interval = 0.05
    observed = _standing(config)
    try:
        ctx = observed.receiver.context
        assert ctx is not None
        wait_until(lambda: proc.pid in ctx.lineage, 20, "the selected pid in the lineage")
        assert os.getpid() not in ctx.lineage
        _release(proc)
        observed.wait_for("process.exit", proc.pid)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        finish(observed)
    (state,) = _lineage_states(observed)
    assert f"matched command=standing-marker-{os.getpid()}" in str(state["collection.reason"])
    paths = {str(r.attributes.get("file.path", "")) for r in observed.logs}
    assert str(tmp_path / "selected.txt") in paths
    _root_parent_is_a_fact_only(observed, proc.pid)


def _root_parent_is_a_fact_only(observed: Observed, root: int) -> None:
    """A followed root's parent (this test, not followed) is named by its pid alone, so the
    normalizer makes no node and no ``spawned`` edge of it (``docs/host.md``, "The root's
    parent"); the root keeps ``parent_pid``."""
    starts = observed.for_pid("process.start", root)
    assert starts
    for attrs in starts:
        assert attrs["process.parent_pid"] == os.getpid()
        assert "process.parent.creation.time" not in attrs
    normalized = Normalizer()(Batch(logs=tuple(observed.logs))).observations
    spawned = [o for o in normalized if o.relation is RelationKind.SPAWNED]
    assert not [o for o in spawned if o.object is not None and f":{root}:" in o.object.id]
    root_facts = [
        o.subject.facts
        for o in normalized
        if o.source.event == "process.start" and o.relation is None and f":{root}:" in o.subject.id
    ]
    assert root_facts
    for facts in root_facts:
        assert isinstance(facts, ProcessFacts)
        assert facts.parent_pid == os.getpid()


def test_user_selector_follows_processes_of_that_user(tmp_path: Path) -> None:
    """A ``user`` selector follows a process running as that user (root: setpriv to nobody)."""
    if os.geteuid() != 0:
        pytest.skip("needs root to start a process as another user")
    os.chmod(tmp_path, 0o777)
    code = "import sys; sys.stdin.readline(); open('by-nobody.txt', 'w').write('x')"
    proc = subprocess.Popen(
        ["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups", python(), "-c", code],
        cwd=tmp_path,
        stdin=subprocess.PIPE,
    )
    observed = _standing(HostConfig(backend="auto", user=["nobody"], selector_interval=0.05))
    try:
        ctx = observed.receiver.context
        assert ctx is not None
        wait_until(lambda: proc.pid in ctx.lineage, 20, "nobody's process in the lineage")
        _release(proc)
        observed.wait_for("process.exit", proc.pid)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        finish(observed)
    paths = {str(r.attributes.get("file.path", "")) for r in observed.logs}
    assert str(tmp_path / "by-nobody.txt") in paths


def _new_cgroup() -> Path | None:
    """A fresh cgroup (v2 where mounted, else the v1 ``pids`` hierarchy), or None."""
    for root in ("/sys/fs/cgroup/unified", "/sys/fs/cgroup", "/sys/fs/cgroup/pids"):
        if not os.path.exists(os.path.join(root, "cgroup.procs")):
            continue
        path = Path(root) / f"otel-bridge-test-{os.getpid()}"
        try:
            path.mkdir()
        except OSError:
            continue
        return path
    return None


def test_cgroup_selector_follows_processes_in_that_cgroup(tmp_path: Path) -> None:
    """A ``cgroup`` selector (a path under /sys/fs/cgroup) follows the processes moved in."""
    group = _new_cgroup() if os.geteuid() == 0 else None
    if group is None:
        pytest.skip("cannot create a cgroup here (needs root and a writable cgroup hierarchy)")
    code = "import sys; sys.stdin.readline(); open('in-cgroup.txt', 'w').write('x')"
    proc = subprocess.Popen([python(), "-c", code], cwd=tmp_path, stdin=subprocess.PIPE)
    observed: Observed | None = None
    try:
        (group / "cgroup.procs").write_text(str(proc.pid))
        config = HostConfig(backend="auto", cgroup=[str(group)], selector_interval=0.05)
        assert config.validate() == []
        observed = _standing(config)
        ctx = observed.receiver.context
        assert ctx is not None
        wait_until(lambda: proc.pid in ctx.lineage, 20, "the cgroup's process in the lineage")
        _release(proc)
        observed.wait_for("process.exit", proc.pid)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        if observed is not None:
            finish(observed)
        group.rmdir()
    paths = {str(r.attributes.get("file.path", "")) for r in observed.logs}
    assert str(tmp_path / "in-cgroup.txt") in paths


@pytest.mark.parametrize(
    ("field", "value", "problem"),
    [
        ("command", ["(unclosed"], "command[0]: not a regular expression"),
        ("user", ["no-such-user-otel-bridge"], "user[0]: no such user"),
        ("cgroup", ["/"], "cgroup[0]: empty cgroup path"),
        ("cgroup", ["a/../b"], "cgroup[0]: '..' is not allowed"),
        ("executable", [" "], "executable[0]: empty pattern"),
        ("selector_interval", 0.001, "selector_interval: must be at least 10ms"),
    ],
)
def test_selector_problems_name_the_key(field: str, value: object, problem: str) -> None:
    """A selector that cannot work is refused with its key path."""
    config = HostConfig()
    setattr(config, field, value)
    assert any(p.startswith(problem) for p in config.validate()), config.validate()


def test_validate_command_refuses_what_run_would(tmp_path: Path) -> None:
    """``otel-bridge validate`` refuses a bad selector and an explicit backend that cannot run
    here, with the key path, before ``run`` would."""
    cfg = tmp_path / "c.yaml"
    cfg.write_text(
        "receivers:\n  host:\n    command: ['(unclosed']\n    strace_path: /nonexistent/strace\n"
        "    backend: strace\n"
        "exporters:\n  file:\n    path: out.jsonl\n"
        "service:\n  pipelines:\n    logs:\n      receivers: [host]\n      exporters: [file]\n"
    )
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(Path.cwd()), *sys.path]))

    def validate() -> subprocess.CompletedProcess[str]:
        return run_cli("validate", str(cfg), cwd=tmp_path, env=env, timeout=None)

    out = validate()
    assert out.returncode == 2, out
    assert "receivers.host.command[0]: not a regular expression" in out.stderr
    cfg.write_text(cfg.read_text().replace("command: ['(unclosed']", "command: [agent]"))
    out = validate()
    assert out.returncode == 2, out
    assert "receivers.host.backend: strace: '/nonexistent/strace' is not installed" in out.stderr
