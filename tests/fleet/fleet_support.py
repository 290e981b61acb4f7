"""Helpers of the fleet tests: simulated hosts, collectors as real processes, the gateway's output.

A *host* here is a network namespace (its own TCP/IP stack, joined to another by a veth pair) plus
a mount namespace in which ``/etc/machine-id`` is bound to the host's own id, so that
``identity.host_id()`` (what the host receiver stamps as ``host.id``) differs per host exactly as
on two machines. Needs root, ``ip`` and ``unshare``; :func:`require_namespaces` skips otherwise.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from waiting import Stderr

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
APP = HERE / "fleet_app.py"
CONFIGS = REPO / "configs"
TOKEN = "fleet-test-token-0123456789"
START_TIMEOUT = 180.0
"""Seconds a collector may take to print its banner: an agent took over 60 s under load average
30 (the restart test failed so, its agent's stderr still empty)."""
BANNER = re.compile(r"receiver otlp: OTLP/grpc on ([\d.]+):(\d+), OTLP/http on ([\d.]+):(\d+)")


def require_namespaces() -> None:
    """Skip unless this process may create network and mount namespaces, and strace exists (an
    agent inside a network namespace other than the initial one cannot use the process
    connector, so its host receiver runs the strace backend)."""
    if os.geteuid() != 0:
        pytest.skip("needs root to create network and mount namespaces")
    for tool in ("ip", "unshare", "strace"):
        if shutil.which(tool) is None:
            pytest.skip(f"needs the {tool} command")
    probe = subprocess.run(
        ["unshare", "-n", "-m", "true"], capture_output=True, text=True, check=False
    )
    if probe.returncode != 0:
        pytest.skip(f"network and mount namespaces not permitted here: {probe.stderr.strip()}")


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True, text=True)


@dataclass
class Host:
    """One simulated host: a network namespace and a machine id."""

    netns: str
    address: str
    host_id: str
    id_file: Path

    def prefix(self) -> list[str]:
        """Run a command on this host: its own machine id, inside its network namespace."""
        script = 'mount --bind "$0" /etc/machine-id && exec "$@"'
        mount = ["unshare", "-m", "sh", "-c", script, str(self.id_file)]
        return [*mount, "ip", "netns", "exec", self.netns]


def link(tmp: Path, tag: str, a: tuple[str, str], b: tuple[str, str]) -> tuple[Host, Host]:
    """Two hosts ``(name, host id)`` on one link, addresses 10.231.0.1 and 10.231.0.2."""
    hosts = []
    for i, (name, host_id) in enumerate((a, b), start=1):
        netns = f"ob{tag}{name}"
        _ip("netns", "add", netns)
        _ip("-n", netns, "link", "set", "lo", "up")
        id_file = tmp / f"machine-id-{name}"
        id_file.write_text(host_id + "\n")
        hosts.append(Host(netns, f"10.231.0.{i}", host_id, id_file))
    ha, hb = hosts
    va, vb = f"ob{tag}{a[0]}v", f"ob{tag}{b[0]}v"
    _ip("link", "add", va, "type", "veth", "peer", "name", vb)
    for host, dev in ((ha, va), (hb, vb)):
        _ip("link", "set", dev, "netns", host.netns)
        _ip("-n", host.netns, "addr", "add", f"{host.address}/24", "dev", dev)
        _ip("-n", host.netns, "link", "set", dev, "up")
    return ha, hb


def remove(hosts: list[Host]) -> None:
    """Delete the hosts' network namespaces (and with them their veth ends)."""
    for host in hosts:
        subprocess.run(["ip", "netns", "del", host.netns], capture_output=True, check=False)


def subprocess_env(**extra: str) -> dict[str, str]:
    """This environment with the working tree first on PYTHONPATH, no OTEL_ variables, plus
    ``extra``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH", "")) if p)
    env.update(extra)
    return env


def start_load(
    agent_url: str, receipts: Path, prefix: Sequence[str] = ()
) -> tuple[subprocess.Popen[str], Stderr]:
    """``fleet_load.py`` sending to the agent at ``agent_url`` (run under ``prefix``, e.g. a
    network namespace) and writing its receipts; the process and its progress reader."""
    client = subprocess.Popen(
        [*prefix, sys.executable, str(HERE / "fleet_load.py"), agent_url, str(receipts)],
        env=subprocess_env(),
        stdin=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    return client, Stderr(client, timeout=60)


class CollectorProcess:
    """``python -m otel_bridge run -c CONFIG [--set ...]`` as a real process."""

    def __init__(
        self,
        config: str,
        env: dict[str, str],
        *,
        prefix: list[str] | None = None,
        sets: list[str] | None = None,
    ) -> None:
        cmd = [*(prefix or []), sys.executable, "-m", "otel_bridge", "--log-level", "INFO"]
        cmd += ["run", "-c", str(CONFIGS / config)]
        for item in sets or []:
            cmd += ["--set", item]
        self.proc = subprocess.Popen(
            cmd,
            env=subprocess_env(OTEL_BRIDGE_LOG_LEVEL="info", **env),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        self.stderr = Stderr(self.proc, timeout=60)
        match = self.stderr.wait_for(BANNER.pattern, timeout=START_TIMEOUT)
        self.grpc_port, self.http_port = int(match[2]), int(match[4])

    def stop(self) -> int:
        """SIGINT (drain) and wait; the exit code."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
        try:
            return self.proc.wait(timeout=90)
        finally:
            self.kill()

    def kill(self) -> None:
        """SIGKILL if still running."""
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


class App:
    """``fleet_app.py ROLE ADDRESS PORT LABEL`` as a real process (see its docstring); the label
    only lets a host receiver's selector tell two otherwise equal command lines apart."""

    def __init__(
        self,
        role: str,
        address: str,
        port: int,
        env: dict[str, str],
        prefix: list[str],
        *,
        label: str = "-",
    ) -> None:
        self.proc = subprocess.Popen(
            [*prefix, sys.executable, str(APP), role, address, str(port), label],
            env=subprocess_env(**env),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline().split()
        assert line[:1] == ["ready"], [*line, self.proc.stderr.read() if self.proc.stderr else ""]
        self.pid = int(line[1])

    def go(self) -> tuple[str, int]:
        """Let a client act; wait for it; its local address and port."""
        assert self.proc.stdin is not None
        assert self.proc.stdout is not None
        self.proc.stdin.write("go\n")
        self.proc.stdin.close()
        out = self.proc.stdout.read().split()
        assert self.wait() == 0
        assert out[:1] == ["local"], out
        return out[1], int(out[2])

    def wait(self) -> int:
        """Wait for the exit; the code (stderr shown on failure)."""
        code = self.proc.wait(timeout=60)
        if code != 0 and self.proc.stderr is not None:
            print(self.proc.stderr.read(), file=sys.stderr)
        return code

    def kill(self) -> None:
        """Stop it if it still runs; close its pipes."""
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        for stream in (self.proc.stdin, self.proc.stdout, self.proc.stderr):
            if stream is not None and not stream.closed:
                stream.close()


def gateway_env(state: Path, cert: Path, key: Path) -> dict[str, str]:
    """The environment ``configs/gateway.yaml`` reads, on ephemeral ports of every address."""
    return {
        "OTEL_BRIDGE_GATEWAY_GRPC_ENDPOINT": "0.0.0.0:0",
        "OTEL_BRIDGE_GATEWAY_HTTP_ENDPOINT": "0.0.0.0:0",
        "OTEL_BRIDGE_GATEWAY_CERT": str(cert),
        "OTEL_BRIDGE_GATEWAY_KEY": str(key),
        "OTEL_BRIDGE_GATEWAY_TOKEN": TOKEN,
        "OTEL_BRIDGE_GATEWAY_STATE": str(state),
    }


def agent_env(endpoint: str, ca: Path, queue: Path) -> dict[str, str]:
    """The environment ``configs/agent.yaml`` reads: the gateway, its CA and token, the queue."""
    return {
        "OTEL_BRIDGE_OTLP_GRPC_ENDPOINT": "127.0.0.1:0",
        "OTEL_BRIDGE_OTLP_HTTP_ENDPOINT": "127.0.0.1:0",
        "OTEL_BRIDGE_GATEWAY_ENDPOINT": endpoint,
        "OTEL_BRIDGE_GATEWAY_CA": str(ca),
        "OTEL_BRIDGE_GATEWAY_SERVER_NAME": "localhost",  # the test certificate's name
        "OTEL_BRIDGE_GATEWAY_TOKEN": TOKEN,
        "OTEL_BRIDGE_QUEUE_DIR": str(queue),
    }


def records(path: Path) -> Iterator[dict[str, Any]]:
    """The JSON lines of a file exporter's output."""
    with open(path, encoding="utf-8") as f:
        for line in f:
            if line.strip():
                yield json.loads(line)


def stored_span_rows(url: str, run: str) -> list[str]:
    """The span ids of run ``run``'s span observations (``<span id>#0``) in the store at ``url``,
    one per stored row (a duplicate shows twice)."""
    import psycopg

    with psycopg.connect(url) as conn:
        rows = conn.execute(
            "SELECT id FROM ob_observations WHERE run_id = %s AND backend = 'otlp' "
            "AND id LIKE '%%#0'",
            (run,),
        ).fetchall()
    return [str(r[0])[:-2] for r in rows]
