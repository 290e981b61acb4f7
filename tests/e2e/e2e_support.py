"""Helpers of the end-to-end tests: run an example under ``otel-bridge observe``, read its graph.

Everything here is real: the model server is a separate process on loopback, ``observe`` is the
installed command line run as a subprocess, and the graph is the ``graph.json`` it wrote.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shlex
import signal
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from cli_support import run_cli


def importable(module: str) -> bool:
    """True when ``module`` can be imported here (found without importing it)."""
    try:
        return importlib.util.find_spec(module) is not None
    except ModuleNotFoundError:  # a parent package is missing
        return False


needs_autogen = pytest.mark.skipif(
    not all(map(importable, ("autogen_agentchat", "autogen_core", "autogen_ext", "openai"))),
    reason="needs AutoGen and its OpenAI client (the examples extra)",
)
"""For tests that run ``examples/autogen_agent.py``."""

needs_langgraph = pytest.mark.skipif(
    not all(
        map(importable, ("langgraph", "langchain_core", "openinference.instrumentation.langchain"))
    ),
    reason="needs LangGraph and OpenInference (the examples extra)",
)
"""For tests that run ``examples/langgraph_agent.py``."""

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "examples"
FILE_RELATIONS = frozenset({"opened", "wrote", "created", "observed_change"})
"""Relations by which a graph shows a file being written (by a process, or seen changing)."""


SLEEP = "sleep 0.25"
COPY = (
    'python3 -c "import pathlib, time; time.sleep(0.15); '
    "pathlib.Path('notes-copy.txt').write_text(pathlib.Path('notes.txt').read_text())\""
)
"""A file-writing command that lives long enough for any backend to read its command line."""


def wait_for_line(process: subprocess.Popen[str], prefix: str, timeout: float) -> str:
    """The rest of the first stdout line of ``process`` starting with ``prefix``."""
    assert process.stdout is not None
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        line = process.stdout.readline()
        if line.startswith(prefix):
            return line[len(prefix) :].strip()
        if not line and process.poll() is not None:
            break
    raise AssertionError(f"no {prefix!r} line from {process.args!r} within {timeout}s")


@dataclass
class ModelServer:
    """The examples' model server, as its own process on loopback."""

    process: subprocess.Popen[str]
    url: str

    @property
    def port(self) -> int:
        """The TCP port the server listens on."""
        return int(self.url.split(":")[2].split("/")[0])

    def stop(self) -> None:
        """Terminate the server and wait for it."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        if self.process.stdout is not None:
            self.process.stdout.close()


def start_model_server(script: Mapping[str, Any], directory: Path) -> ModelServer:
    """Write ``script`` into ``directory`` and start the model server on it."""
    path = directory / "model-script.json"
    path.write_text(json.dumps(script), encoding="utf-8")
    process = subprocess.Popen(
        [sys.executable, str(EXAMPLES / "model_server.py"), "--script", str(path)],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        url = wait_for_line(process, "MODEL_SERVER_URL=", timeout=20)
    except AssertionError:
        process.kill()
        process.wait()
        raise
    return ModelServer(process=process, url=url)


def tool_script(*steps: dict[str, Any], final: str = "done") -> dict[str, Any]:
    """A model script whose steps are one tool call each (``{"name":..., "arguments":...}``)."""
    return {
        "model": "scripted-model",
        "steps": [{"tool_calls": [step]} for step in steps] + [{"content": final}],
    }


def command_call(command: str) -> dict[str, Any]:
    """A ``run_command`` tool call."""
    return {"name": "run_command", "arguments": {"command": command}}


def write_call(path: str, content: str) -> dict[str, Any]:
    """A ``write_file`` tool call."""
    return {"name": "write_file", "arguments": {"path": path, "content": content}}


@dataclass
class Graph:
    """A parsed ``graph.json`` with the look-ups the tests need."""

    data: dict[str, Any]
    nodes: dict[str, dict[str, Any]] = field(init=False)
    edges: list[dict[str, Any]] = field(init=False)

    def __post_init__(self) -> None:
        assert self.data.get("format") == "otel-bridge.graph", self.data.get("format")
        self.nodes = {n["id"]: n for n in self.data["nodes"]}
        self.edges = list(self.data["edges"])

    def of_kind(self, kind: str) -> list[dict[str, Any]]:
        """Nodes of one kind."""
        return [n for n in self.nodes.values() if n["kind"] == kind]

    def select(
        self, relation: str | None = None, source: str | None = None, target: str | None = None
    ) -> list[dict[str, Any]]:
        """Edges matching every given field."""
        return [
            e
            for e in self.edges
            if (relation is None or e["relation"] == relation)
            and (source is None or e["source"] == source)
            and (target is None or e["target"] == target)
        ]

    def processes_running(self, argv: Sequence[str]) -> list[dict[str, Any]]:
        """Process nodes whose command line is exactly ``argv``."""
        return [
            n
            for n in self.of_kind("process")
            if list(n["attrs"].get("process.command_args") or []) == list(argv)
        ]

    def tool_calls(self, tool: str | None = None) -> list[dict[str, Any]]:
        """Tool call nodes (of one tool), in the order the tool spans started."""
        calls = [
            n
            for n in self.of_kind("tool_call")
            if tool is None or n["attrs"].get("gen_ai.tool.name") == tool
        ]
        return sorted(calls, key=lambda n: (n.get("first_seen") or 0, n["id"]))

    def command_of(self, tool_call_id: str) -> dict[str, Any] | None:
        """The command node a tool call declared, if any."""
        for edge in self.select("declared_command", source=tool_call_id):
            return self.nodes[edge["target"]]
        return None

    def process_links(self, tool_call_id: str) -> list[dict[str, Any]]:
        """``correlated_with_process`` edges from a tool call or from the command it declared."""
        sources = {tool_call_id}
        command = self.command_of(tool_call_id)
        if command is not None:
            sources.add(command["id"])
        return [e for e in self.select("correlated_with_process") if e["source"] in sources]

    def file_edges(self, path: Path | str) -> list[dict[str, Any]]:
        """Edges showing the file at ``path`` written, opened or seen changing."""
        target = f"file:{os.path.normpath(path)}"
        return [e for e in self.edges if e["target"] == target and e["relation"] in FILE_RELATIONS]

    def endpoints_connected(self, process_id: str) -> list[str]:
        """Ids of the endpoints a process connected to."""
        return [e["target"] for e in self.select("connected_to", source=process_id)]

    def descendants(self, process_id: str) -> Iterator[str]:
        """Process ids spawned, directly or not, by ``process_id``."""
        seen: set[str] = set()
        todo = [process_id]
        while todo:
            for edge in self.select("spawned", source=todo.pop()):
                if edge["target"] not in seen:
                    seen.add(edge["target"])
                    todo.append(edge["target"])
                    yield edge["target"]


@dataclass
class Observed:
    """The outcome of one ``otel-bridge observe`` run."""

    returncode: int
    stdout: str
    stderr: str
    run_dir: Path
    seconds: float

    def observations(self) -> list[dict[str, Any]]:
        """The observations of the run's correlated stream (``correlated.jsonl``)."""
        found = sorted(self.run_dir.rglob("correlated.jsonl"))
        assert found, f"no correlated.jsonl under {self.run_dir}"
        out = []
        with open(found[0], encoding="utf-8") as f:
            for line in f:
                record = json.loads(line)
                if "observation" in record:
                    out.append(record["observation"])
        return out

    @property
    def graph(self) -> Graph:
        """The run's finalized graph."""
        candidates = sorted(self.run_dir.rglob("graph.json"))
        assert candidates, f"no graph.json under {self.run_dir}: {self.stderr[-2000:]}"
        return Graph(json.loads(candidates[0].read_text(encoding="utf-8")))


def observe(
    argv: Sequence[str],
    *,
    run_dir: Path,
    cwd: Path,
    config: Path | None = None,
    env: Mapping[str, str] | None = None,
    timeout: float = 120,
    options: Sequence[str] = (),
) -> Observed:
    """Run ``otel-bridge observe [-c config] [options] -o run_dir -- argv`` in ``cwd`` and wait
    for it.

    The tools' ``python3`` is this interpreter's (its folder first on ``PATH``): a version
    manager's shim would run it under another name and through helper processes, which the
    graph would then show.
    """
    command = ["observe", "-o", str(run_dir)]
    path = os.pathsep.join([os.path.dirname(sys.executable), os.environ.get("PATH", "")])
    if config is not None:
        command += ["-c", str(config)]
    command += [*options, "--", *argv]
    started = time.monotonic()
    done = run_cli(
        *command, cwd=cwd, env={**os.environ, "PATH": path, **(env or {})}, timeout=timeout
    )
    observed = Observed(
        returncode=done.returncode,
        stdout=done.stdout,
        stderr=done.stderr,
        run_dir=run_dir,
        seconds=time.monotonic() - started,
    )
    assert done.returncode == 0, (
        f"{shlex.join(command)} exited {done.returncode}\n"
        f"{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    )
    return observed


def example(name: str, *args: str) -> list[str]:
    """The command line running one example with this interpreter."""
    return [sys.executable, str(EXAMPLES / name), *args]


def process_argvs(
    graph: Graph, process_id: str, stream: Sequence[Mapping[str, Any]] = ()
) -> set[tuple[str, ...]]:
    """Every command line a process had: at start and at each exec.

    A graph node keeps its first-seen attributes, a forked child is first seen with its parent's
    command line, and an exec into the same image merges into one ``executed`` edge, so what a
    process *ran* is read from the observation stream (``stream``, the run's correlated.jsonl)
    as well as from the graph.
    """
    argvs = set()
    node_args = graph.nodes[process_id]["attrs"].get("process.command_args")
    if node_args:
        argvs.add(tuple(node_args))
    for edge in graph.select("executed", source=process_id):
        args = (edge.get("attrs") or {}).get("process.command_args")
        if args:
            argvs.add(tuple(args))
    for obs in stream:
        if obs["subject"]["id"] != process_id:
            continue
        if obs["attrs"].get("event.name") in ("process.start", "process.exec"):
            args = obs["attrs"].get("process.command_args")
            if args:
                argvs.add(tuple(args))
    return argvs


def read_summary(run_dir: Path) -> dict[str, Any]:
    """The run's ``summary.json``."""
    found = sorted(run_dir.rglob("summary.json"))
    assert found, f"no summary.json under {run_dir}"
    summary: dict[str, Any] = json.loads(found[0].read_text(encoding="utf-8"))
    return summary


SCRIPT = tool_script(command_call(SLEEP), write_call("notes.txt", "observed\n"), command_call(COPY))
"""The end-to-end model script: a command, a file write, a file-writing command, an answer."""
