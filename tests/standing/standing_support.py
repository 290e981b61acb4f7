"""Helpers of the standing-collector tests: a collector process, a downstream stand-in, the agent.

* :class:`RunningCollector`: ``python -m otel_bridge --log-level INFO run -c CONFIG`` as a real
  subprocess, its OTLP ports read from its start-up banner, stopped with SIGINT (drain).
* :class:`Downstream`: an OTLP receiver in this process (otel-bridge's own, gRPC and HTTP) with
  a recording exporter: stands in for Phoenix and Jaeger at the endpoint their config names.
* :class:`Agent`: ``tests/standing/sdk_agent.py`` (OpenTelemetry SDK only) as a plain subprocess.
"""

from __future__ import annotations

import os
import pwd
import re
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from waiting import Stderr

from otel_bridge.component import RECEIVER
from otel_bridge.config import parse_config
from otel_bridge.model import Span
from otel_bridge.pipeline import Collector
from otel_bridge.registry import default_registry
from otel_bridge.testing import LoopbackServer, RecordingConsumer, recording_exporter_factory

IS_ROOT = os.geteuid() == 0
HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
AGENT = HERE / "sdk_agent.py"
_BANNER = re.compile(r"receiver otlp: OTLP/grpc on ([\d.]+):(\d+), OTLP/http on ([\d.]+):(\d+)")


def subprocess_env(**extra: str) -> dict[str, str]:
    """This environment with the working tree first on PYTHONPATH, plus ``extra``."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH", "")) if p)
    for key in [k for k in env if k.startswith("OTEL_")]:
        del env[key]
    env.update(extra)
    return env


class RunningCollector:
    """``otel-bridge run -c CONFIG [ARGS]`` on ephemeral OTLP ports (see the module docstring)."""

    def __init__(
        self,
        config: Path | str,
        cwd: Path,
        env: dict[str, str],
        prefix: list[str] | None = None,
        args: tuple[str, ...] = (),
    ) -> None:
        env = {
            "OTEL_BRIDGE_OTLP_GRPC_ENDPOINT": "127.0.0.1:0",
            "OTEL_BRIDGE_OTLP_HTTP_ENDPOINT": "127.0.0.1:0",
            "OTEL_BRIDGE_LOG_LEVEL": "info",  # local.yaml's level; the others follow --log-level
            **env,
        }
        cmd = [*(prefix or []), sys.executable, "-m", "otel_bridge", "--log-level", "INFO"]
        cmd += ["run", "-c", str(config), *args]
        self.proc = subprocess.Popen(
            cmd,
            cwd=cwd,
            env=subprocess_env(**env),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        self.stderr = Stderr(self.proc, timeout=60)
        match = self.stderr.wait_for(_BANNER.pattern)
        self.grpc_port, self.http_port = int(match[2]), int(match[4])
        self.output = ""

    def stop(self) -> int:
        """SIGINT, then wait for the drain; the exit code (its stderr is then in ``output``)."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
        try:
            return self.proc.wait(timeout=60)
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
                self.proc.wait()
            if not self.output:
                self.output = self.stderr.log()


class Downstream:
    """otel-bridge's OTLP receiver with a recording exporter, on ephemeral ports."""

    def __init__(self) -> None:
        registry = default_registry()
        registry.add(recording_exporter_factory("recording"))
        doc = {
            "receivers": {
                "otlp": {
                    "protocols": {
                        "grpc": {"endpoint": "127.0.0.1:0"},
                        "http": {"endpoint": "127.0.0.1:0"},
                    }
                }
            },
            "exporters": {"recording": None},
            "service": {
                "pipelines": {"traces": {"receivers": ["otlp"], "exporters": ["recording"]}}
            },
        }
        self.collector = Collector(parse_config(doc, env={}, registry=registry))
        self.collector.start()
        (rid,) = self.collector.component_ids(RECEIVER)
        status = self.collector.status(rid)
        grpc, http = status.endpoint("grpc"), status.endpoint("http")
        assert grpc is not None
        assert http is not None
        self.grpc_endpoint = f"127.0.0.1:{grpc.port}"
        self.http_url = http.url
        recorder = self.collector.component("recording")
        assert isinstance(recorder, RecordingConsumer)
        self.recorder = recorder

    def spans(self) -> list[Span]:
        """Every span received so far."""
        return self.recorder.spans

    def stop(self) -> None:
        """Shut the stand-in down."""
        self.collector.shutdown()


class Agent:
    """The SDK agent as a plain subprocess (see ``sdk_agent.py``)."""

    def __init__(
        self,
        out_file: Path,
        port: int,
        endpoint: str,
        protocol: str,
        prefix: list[str] | None = None,
        *,
        name: str = "",
        pidless: bool = False,
    ) -> None:
        env = subprocess_env(
            OTEL_EXPORTER_OTLP_ENDPOINT=endpoint,
            OTEL_EXPORTER_OTLP_PROTOCOL=protocol,
            # the SDK's default detector ("otel") states no process.pid
            OTEL_EXPERIMENTAL_RESOURCE_DETECTORS="otel" if pidless else "process,host",
            OTEL_SERVICE_NAME="standing-agent",
            **({"SDK_AGENT_NAME": name} if name else {}),
        )
        self.proc = subprocess.Popen(
            [*(prefix or []), sys.executable, str(AGENT), str(out_file), str(port)],
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        assert line.strip() == "reported", line + (
            self.proc.stderr.read() if self.proc.stderr else ""
        )

    @property
    def pid(self) -> int:
        """The agent's pid."""
        return self.proc.pid

    def go(self) -> None:
        """Let the agent act, and wait for it to exit 0."""
        assert self.proc.stdin is not None
        self.proc.stdin.write("go\n")
        self.proc.stdin.close()
        code = self.proc.wait(timeout=60)
        err = self.proc.stderr.read() if self.proc.stderr else ""
        assert code == 0, err

    def kill(self) -> None:
        """Stop the agent if it still runs; close its pipes."""
        end_process(self.proc)


def end_process(proc: subprocess.Popen[str]) -> None:
    """Kill ``proc`` if it still runs, reap it and close its pipes."""
    if proc.poll() is None:
        proc.kill()
        proc.wait()
    for stream in (proc.stdin, proc.stdout, proc.stderr):
        if stream is not None and not stream.closed:
            stream.close()


def run_agent(
    collector: RunningCollector,
    tmp_path: Path,
    protocol: str,
    prefix: list[str] | None = None,
    *,
    name: str = "",
    pidless: bool = False,
) -> tuple[Agent, Path, int]:
    """Start the SDK agent against ``collector``, wait until it is followed, let it act, stop
    the collector (exit 0). Returns the agent, its output file and its loopback server's port.
    With ``pidless`` its resource states no ``process.pid`` (the SDK's default)."""
    out = tmp_path / "agent-output.txt"
    server = LoopbackServer()
    port = collector.grpc_port if protocol == "grpc" else collector.http_port
    endpoint = f"http://127.0.0.1:{port}"
    agent = Agent(out, server.port, endpoint, protocol, prefix, name=name, pidless=pidless)
    try:
        collector.stderr.wait_for(rf"following pid {agent.pid} from now")
        agent.go()
    finally:
        agent.kill()
        server.close()
        code = collector.stop()
    assert code == 0, collector.output
    return agent, out, server.port


def need(tool: str) -> None:
    """Skip the test when ``tool`` is not installed."""
    if shutil.which(tool) is None:
        pytest.skip(f"{tool} is not installed")


_PLAIN = ["--reuid=nobody", "--regid=nogroup", "--clear-groups", "--inh-caps=-all"]
_READ = ["--inh-caps=-all,+dac_read_search", "--ambient-caps=+dac_read_search"]


def _can_run(prefix: list[str]) -> bool:
    probe = subprocess.run(
        [*prefix, sys.executable, "-c", "import otel_bridge, opentelemetry.sdk"],
        env=subprocess_env(),
        cwd="/",
        capture_output=True,
        check=False,
    )
    return probe.returncode == 0


def unprivileged_prefix() -> list[str]:
    """The command prefix that runs a command as a plain user (``[]`` when we are one).

    As root: ``setpriv`` to ``nobody`` with no capability. Where this interpreter lives in a
    private home directory (a pyenv under ``/root``) ``nobody`` cannot start it, so it keeps
    one capability, CAP_DAC_READ_SEARCH (reading files), and nothing host observation uses:
    no CAP_SYS_ADMIN, CAP_NET_ADMIN, CAP_BPF, CAP_PERFMON or CAP_SYS_PTRACE.
    """
    if not IS_ROOT:
        return []
    need("setpriv")
    try:
        pwd.getpwnam("nobody")
    except KeyError:
        pytest.skip("no unprivileged account 'nobody' to run as")
    plain = ["setpriv", *_PLAIN]
    if _can_run(plain):
        return plain
    reading = ["setpriv", *_PLAIN[:3], *_READ]
    if _can_run(reading):
        return reading
    pytest.skip(f"user nobody cannot run {sys.executable} with otel_bridge importable")


def start_agent(
    collector: RunningCollector,
    argv: list[str],
    first_line: str,
    *,
    cwd: Path | None = None,
    **env: str,
) -> subprocess.Popen[str]:
    """Start the Python agent ``argv`` of ``collector`` (environment ``subprocess_env(**env)``)
    with its standard input and output piped, and wait for it to print ``first_line``. The
    caller ends both (:func:`end_process`, ``collector.stop()``); when that line does not come,
    both are ended here."""
    agent = subprocess.Popen(
        [sys.executable, *argv],
        cwd=cwd,
        env=subprocess_env(**env),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert agent.stdout is not None
        assert agent.stdout.readline().strip() == first_line
    except BaseException:
        end_process(agent)
        collector.stop()
        raise
    return agent


def run_gated_agent(
    collector: RunningCollector,
    cwd: Path,
    argv: list[str],
    first_line: str,
    *,
    protocol: str = "http/protobuf",
    follow: str = "",
    **env: str,
) -> tuple[int, str]:
    """Run the Python agent ``argv`` (in ``cwd``) against ``collector``'s OTLP port for
    ``protocol``: wait for it to print ``first_line``, then until the collector logs that it
    follows it (the line starting with ``follow`` after ``from now: `` when given), then let it
    go on (one line on its standard input) and wait for its exit 0; the collector is stopped
    (exit 0) either way. Returns the agent's pid and the collector's follow line."""
    port = collector.grpc_port if protocol == "grpc" else collector.http_port
    agent = start_agent(
        collector,
        argv,
        first_line,
        cwd=cwd,
        OTEL_EXPORTER_OTLP_ENDPOINT=f"http://127.0.0.1:{port}",
        OTEL_EXPORTER_OTLP_PROTOCOL=protocol,
        **env,
    )
    try:
        assert agent.stdin is not None
        pattern = rf"following pid {agent.pid} from now: {re.escape(follow)}.*"
        followed = collector.stderr.wait_for(pattern)[0]
        agent.stdin.write("go\n")
        agent.stdin.close()
        assert agent.wait(timeout=60) == 0
    finally:
        end_process(agent)
        code = collector.stop()
    assert code == 0, collector.output
    return agent.pid, followed
