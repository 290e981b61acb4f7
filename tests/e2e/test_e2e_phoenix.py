"""``configs/phoenix.yaml`` against a real Arize Phoenix server on loopback, read back by its API.

Phoenix is started once for the module (it takes 10-30 s to boot on two cores), offline, in a
temporary working directory, and read back through its REST API. Phoenix accepts OTLP only as
protobuf over HTTP and drops span links, so the test checks what Phoenix keeps: the tool spans
carry their bridge evidence as attributes, and the OS plane arrives as its own spans under its
own resource, which Phoenix files in a different project from the agent's.
"""

from __future__ import annotations

import importlib.util
import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from e2e_support import COPY, REPO, SCRIPT, SLEEP, example, observe, start_model_server
from waiting import poll, wait_until

from otel_bridge.testing import free_port

pytestmark = [pytest.mark.slow, pytest.mark.phoenix, pytest.mark.examples]

BOOT_DEADLINE = 120.0
"""Seconds Phoenix may take to answer /healthz (about 15 s seen on two busy cores)."""
INGEST_DEADLINE = 60.0
AGENT_PROJECT = "otel-bridge-e2e-agent"
BRIDGE = "otel_bridge.bridge."


def healthy(url: str) -> bool:
    """True when Phoenix answers ``/healthz``."""
    try:
        with urllib.request.urlopen(f"{url}/healthz", timeout=2) as response:
            return bool(response.status == 200)
    except (urllib.error.URLError, OSError):
        return False


@pytest.fixture(scope="module")
def phoenix(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A Phoenix server on loopback for this module; its base URL."""
    if importlib.util.find_spec("phoenix") is None:  # a top-level find_spec imports nothing
        pytest.skip("the phoenix extra is not installed")
    workdir = tmp_path_factory.mktemp("phoenix")
    port, grpc_port = free_port(), free_port()
    env = {
        **os.environ,
        "PHOENIX_HOST": "127.0.0.1",
        "PHOENIX_PORT": str(port),
        "PHOENIX_GRPC_PORT": str(grpc_port),
        "PHOENIX_WORKING_DIR": str(workdir),
        "PHOENIX_TELEMETRY_ENABLED": "false",
    }
    log = open(workdir / "phoenix.log", "wb")  # noqa: SIM115 - closed in the finally below
    process = subprocess.Popen(
        [sys.executable, "-m", "phoenix.server.main", "serve"],
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        started = time.monotonic()

        def up() -> bool:
            if process.poll() is not None:
                pytest.fail(f"Phoenix exited {process.returncode}: see {workdir}/phoenix.log")
            return healthy(url)

        wait_until(up, BOOT_DEADLINE, f"Phoenix to answer at {url}", interval=0.5)
        print(f"phoenix up in {time.monotonic() - started:.1f}s")
        yield url
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        log.close()


def phoenix_spans(url: str, project: str) -> list[dict[str, Any]]:
    """The spans of one Phoenix project, read through Phoenix's REST API (``/v1/projects``).

    The REST API, not ``phoenix.client``: importing the ``phoenix`` package costs 15-20 s.
    A project that has received no span yet answers 404: no spans.
    """
    out: list[dict[str, Any]] = []
    cursor = ""
    while True:
        query = urllib.parse.urlencode({"limit": 500, **({"cursor": cursor} if cursor else {})})
        path = f"{url}/v1/projects/{urllib.parse.quote(project)}/spans?{query}"
        try:
            with urllib.request.urlopen(path, timeout=10) as response:
                page = json.load(response)
        except urllib.error.HTTPError as exc:
            exc.close()
            if exc.code == 404:
                return out
            raise
        out.extend(page["data"])
        cursor = page.get("next_cursor") or ""
        if not cursor:
            return out


def ingested(read: Callable[[], list[Any]], ready: Callable[[list[Any]], bool]) -> list[Any]:
    """Call ``read`` until ``ready`` holds for its result or the ingest deadline passes."""
    return poll(read, ready, INGEST_DEADLINE, interval=0.5)


def test_phoenix_config_delivers_evidence_and_os_plane(phoenix: str, tmp_path: Path) -> None:
    """Phoenix keeps the tool spans' bridge evidence and the OS plane in its own project."""
    workdir = (tmp_path / "work").resolve()
    workdir.mkdir()
    model = start_model_server(SCRIPT, tmp_path)
    try:
        observe(
            example("plain_otel_agent.py", "--model-url", model.url, "--no-instrument"),
            run_dir=tmp_path / "run",
            cwd=workdir,
            config=REPO / "configs" / "phoenix.yaml",
            env={
                "PHOENIX_COLLECTOR_ENDPOINT": phoenix,
                "OTEL_BRIDGE_OTLP_GRPC_ENDPOINT": "127.0.0.1:0",
                "OTEL_BRIDGE_OTLP_HTTP_ENDPOINT": "127.0.0.1:0",
                # Phoenix files spans by this resource attribute: the agent's get a project of
                # their own, the OS plane (its own resource, without it) lands in "default".
                "OTEL_RESOURCE_ATTRIBUTES": f"openinference.project.name={AGENT_PROJECT}",
            },
        )
    finally:
        model.stop()

    def spans(project: str) -> Callable[[], list[Any]]:
        def read() -> list[Any]:
            return phoenix_spans(phoenix, project)

        return read

    agent_spans = ingested(
        spans(AGENT_PROJECT),
        lambda got: (
            sum(s["name"] == "execute_tool run_command" for s in got) == 2
            and any(s["name"] == "invoke_agent plain-agent" for s in got)
        ),
    )
    tools = sorted(
        (s for s in agent_spans if s["name"] == "execute_tool run_command"),
        key=lambda s: s["start_time"],
    )
    assert len(tools) == 2, [s["name"] for s in agent_spans]
    for tool, command in zip(tools, (SLEEP, COPY), strict=True):
        attrs = tool["attributes"]
        assert json.loads(attrs["gen_ai.tool.call.arguments"]) == {"command": command}
        assert attrs[BRIDGE + "inferred"] is True
        assert attrs[BRIDGE + "causal"] is False
        assert str(attrs[BRIDGE + "method"]).startswith("singleton")
        assert 0.80 <= float(attrs[BRIDGE + "score"]) <= 0.95
        assert attrs[BRIDGE + "grade"] == "D"
        assert str(attrs[BRIDGE + "process.id"]).startswith("process:")
        assert any(e["name"] == "otel_bridge.bridge" for e in tool["events"])

    os_spans = ingested(
        spans("default"),
        lambda got: any(s["attributes"].get("evidence.channel") == "os" for s in got),
    )
    # The OS plane has arrived (in its own project), so none of it can still land in the agent's.
    assert not any(s["name"].startswith("process ") for s in spans(AGENT_PROJECT)())
    processes = {
        s["attributes"].get("otel_bridge.process.id"): s
        for s in os_spans
        if s["attributes"].get("evidence.channel") == "os"
    }
    bridged = {t["attributes"][BRIDGE + "process.id"] for t in tools}
    assert bridged <= set(processes), (bridged, set(processes))
    sleeper = processes[tools[0]["attributes"][BRIDGE + "process.id"]]
    assert sleeper["name"] == "process sleep"
    assert list(sleeper["attributes"]["process.command_args"]) == ["sleep", "0.25"]
