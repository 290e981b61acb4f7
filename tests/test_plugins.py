"""Third-party components are found through the ``otel_bridge.components`` entry-point group.

The plug-in under ``tests/testdata/plugin`` is a real package: it is built and installed with pip
into a private directory, and collectors started in subprocesses with that directory on their path
find its processor, validate its config with their own key paths, and run data through it.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from cli_support import run_cli
from waiting import poll

from otel_bridge.testing import free_port

PLUGIN = Path(__file__).parent / "testdata" / "plugin"


@pytest.fixture(scope="module")
def plugin_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A directory holding the installed plug-in (package and its entry-point metadata)."""
    target = tmp_path_factory.mktemp("plugin-site")
    source = tmp_path_factory.mktemp("plugin-src") / "plugin"
    shutil.copytree(PLUGIN, source)  # pip builds in the source tree: keep the repository clean
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "--quiet",
            "--no-deps",
            "--target",
            str(target),
            str(source),
        ],
        check=True,
        capture_output=True,
        timeout=300,
    )
    assert list(target.glob("otel_bridge_tag_plugin-*.dist-info"))
    return target


def _env(extra: Path | None) -> dict[str, str]:
    env = dict(os.environ)
    if extra is not None:
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(extra), env.get("PYTHONPATH", "")) if p)
    return env


def _config(path: Path, port: int, tag: str, out: Path) -> Path:
    path.write_text(
        f"""
receivers:
  otlp:
    protocols:
      http: {{endpoint: 127.0.0.1:{port}}}
processors:
  tag: {{tag: "{tag}"}}
exporters:
  file: {{path: "{out}", signals: [spans], flush_interval: 0}}
service:
  pipelines:
    traces:
      receivers: [otlp]
      processors: [tag]
      exporters: [file]
""",
        encoding="utf-8",
    )
    return path


def test_plugin_processor_is_found_and_validated(plugin_path: Path, tmp_path: Path) -> None:
    """With the plug-in installed, `validate` knows type `tag` and checks its config."""
    good = _config(tmp_path / "good.yaml", free_port(), "t1", tmp_path / "out.jsonl")
    result = run_cli("validate", str(good), cwd=tmp_path, env=_env(plugin_path))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "tag" in result.stdout

    bad = _config(tmp_path / "bad.yaml", free_port(), "", tmp_path / "out.jsonl")
    result = run_cli("validate", str(bad), cwd=tmp_path, env=_env(plugin_path))
    assert result.returncode != 0
    assert "processors.tag.tag: must not be empty" in result.stdout + result.stderr


def test_without_the_plugin_the_type_is_unknown(tmp_path: Path) -> None:
    """The same config without the plug-in installed is refused for its unknown type."""
    cfg = _config(tmp_path / "c.yaml", free_port(), "t1", tmp_path / "out.jsonl")
    result = run_cli("validate", str(cfg), cwd=tmp_path, env=_env(None))
    assert result.returncode != 0
    text = result.stdout + result.stderr
    assert "processors.tag" in text
    assert "tag" in text


@pytest.fixture
def collector(plugin_path: Path, tmp_path: Path) -> Iterator[tuple[int, Path]]:
    """A standing collector whose traces pipeline runs through the plug-in's processor."""
    port = free_port()
    out = tmp_path / "spans.jsonl"
    cfg = _config(tmp_path / "run.yaml", port, "from-plugin", out)
    proc = subprocess.Popen(
        [sys.executable, "-m", "otel_bridge", "run", "-c", str(cfg)],
        env=_env(plugin_path),
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:

        def listening() -> bool:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            except OSError:
                return False
            return True

        if not poll(listening, lambda up: up or proc.poll() is not None, 60):
            output = proc.stdout.read() if proc.stdout else ""
            pytest.fail(f"collector did not listen on {port}: {output}")
        yield port, out
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.communicate(timeout=60)


def test_plugin_processor_runs_in_a_pipeline(collector: tuple[int, Path]) -> None:
    """A span sent by the OTel SDK's HTTP exporter comes out stamped by the plug-in."""
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor

    port, out = collector
    provider = TracerProvider(resource=Resource.create({"service.name": "plugin-test"}))
    exporter = OTLPSpanExporter(endpoint=f"http://127.0.0.1:{port}/v1/traces")
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    with provider.get_tracer("plugin-test").start_as_current_span("stamped-span"):
        pass
    provider.shutdown()

    text = poll(
        lambda: out.read_text(encoding="utf-8") if out.exists() else "",
        lambda written: "stamped-span" in written,
        30,
    )
    assert "stamped-span" in text
    assert "plugin.tag" in text
    assert "from-plugin" in text
