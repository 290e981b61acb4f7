"""The command line's contracts: commands reach components only through the protocols of
``otel_bridge.component``, ``--help`` imports no command's dependencies, ``components`` lists the
registry, ``validate`` takes ``--config``, and ``observe -c`` loads files like ``validate``."""

from __future__ import annotations

import argparse
import ast
import json
import subprocess
import sys
from pathlib import Path

import pytest

import otel_bridge
from otel_bridge import cli
from otel_bridge.commands import components as components_command
from otel_bridge.registry import build_registry, component_modules

COMMANDS_DIR = Path(otel_bridge.__file__).parent / "commands"
FORBIDDEN = ("otel_bridge.processors", "otel_bridge.receivers", "otel_bridge.exporters")
HEAVY = ("grpc", "google.protobuf", "networkx", "yaml", "otel_bridge.config.loader", "msgspec")


def imported_modules(tree: ast.AST) -> list[str]:
    """Every module an ``import`` or ``from ... import`` statement names, anywhere in ``tree``."""
    found: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.extend(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            found.append(node.module)
            found.extend(f"{node.module}.{alias.name}" for alias in node.names)
    return found


def test_commands_import_no_component_package() -> None:
    """No module under otel_bridge/commands imports a receiver, processor or exporter package:
    commands read components through otel_bridge.component's status protocols only."""
    files = sorted(COMMANDS_DIR.glob("*.py"))
    assert len(files) >= 7
    offending = [
        (path.name, module)
        for path in files
        for module in imported_modules(ast.parse(path.read_text(encoding="utf-8")))
        if module.startswith(FORBIDDEN)
    ]
    assert offending == []


def test_the_ast_check_sees_imports_inside_functions() -> None:
    """The check above walks the whole tree, so a lazy import inside a function is caught."""
    source = "def f():\n    from otel_bridge.processors.correlate import CorrelateProcessor\n"
    assert "otel_bridge.processors.correlate" in imported_modules(ast.parse(source))


def run_python(code: str) -> str:
    """Run ``code`` in a fresh interpreter with this tree first on the path; its stdout."""
    env_path = str(Path(otel_bridge.__file__).parent.parent)
    result = subprocess.run(
        [sys.executable, "-c", f"import sys; sys.path.insert(0, {env_path!r}); {code}"],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return result.stdout


def test_help_imports_no_command_dependencies() -> None:
    """``otel-bridge --help`` imports no command module and none of gRPC, protobuf, networkx,
    the YAML loader or msgspec."""
    out = run_python(
        "import contextlib, io, json\n"
        "from otel_bridge.cli import main\n"
        "with contextlib.redirect_stdout(io.StringIO()):\n"
        "    try:\n"
        "        main(['--help'])\n"
        "    except SystemExit:\n"
        "        pass\n"
        "print(json.dumps(sorted(sys.modules)))"
    )
    modules = json.loads(out)
    heavy = [m for m in modules if m.startswith(HEAVY)]
    commands = [m for m in modules if m.startswith("otel_bridge.commands.")]
    assert heavy == []
    assert commands == []


def test_one_command_imports_only_its_module() -> None:
    """Parsing ``verify DIR`` imports the verify command and no other command module."""
    out = run_python(
        "import json\n"
        "from otel_bridge.cli import build_parser\n"
        "build_parser(['verify', 'x']).parse_args(['verify', 'x'])\n"
        "print(json.dumps(sorted(m for m in sys.modules if m.startswith('otel_bridge.commands.'))))"
    )
    assert json.loads(out) == ["otel_bridge.commands.verify"]


def test_placeholder_help_is_the_command_help() -> None:
    """The one-line help ``--help`` shows without importing a command is the command's own."""
    full = cli.build_parser()
    lazy = cli.build_parser(["--help"])
    assert sorted(cli.COMMANDS) == sorted(_choices_help(full))
    assert _choices_help(full) == _choices_help(lazy)


def _choices_help(parser: argparse.ArgumentParser) -> dict[str, str]:
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return {a.dest: str(a.help) for a in sub._choices_actions}


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["--log-level", "DEBUG", "observe", "--", "ls"], "observe"),
        (["--log-level=DEBUG", "graph", "x.json"], "graph"),
        (["--help"], None),
        (["-h", "run"], "run"),
        ([], None),
    ],
)
def test_chosen_command(argv: list[str], expected: str | None) -> None:
    """The command is the first positional argument, skipping the top-level option values."""
    assert cli.chosen_command(argv) == expected


def test_components_lists_every_type_with_its_origin(capsys: pytest.CaptureFixture[str]) -> None:
    """``otel-bridge components`` lists receivers, processors and exporters as built-in."""
    assert cli.main(["components"]) == 0
    out = capsys.readouterr().out
    for section in ("receivers:", "processors:", "exporters:"):
        assert section in out
    assert any(line.split()[:2] == ["otlp", "built-in"] for line in out.splitlines())
    assert any(line.split()[:2] == ["correlate", "built-in"] for line in out.splitlines())
    assert "problems:" not in out


def test_components_names_a_plugin_that_failed_to_load(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A plug-in module that cannot be imported is listed under problems; exit code 1."""
    registry = build_registry([*component_modules(), "no_such_plugin_module"])
    monkeypatch.setattr(components_command, "default_registry", lambda: registry)
    assert cli.main(["components", "--counters"]) == 1
    captured = capsys.readouterr()
    assert "no_such_plugin_module" in captured.out.split("problems:")[1]
    assert "receiver.otlp.spans_accepted" in captured.out
    assert "1 component module(s) failed to load" in captured.err


def test_validate_accepts_config_option(capsys: pytest.CaptureFixture[str]) -> None:
    """``validate --config FILE`` is the same as ``validate FILE``."""
    good = str(Path(otel_bridge.__file__).parent / "configs" / "local.yaml")
    assert cli.main(["validate", good]) == 0
    positional = capsys.readouterr().out
    assert cli.main(["validate", "--config", good]) == 0
    assert capsys.readouterr().out == positional
    assert cli.main(["validate"]) == 2
    assert "no configuration given" in capsys.readouterr().err


def test_observe_refuses_a_duplicate_key_like_validate(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``observe -c`` reads its file with validate's loader: a duplicate key is refused with the
    same message, before anything runs."""
    config = tmp_path / "dup.yaml"
    config.write_text("receivers:\n  otlp: {}\n  otlp: {}\nservice: {}\n")
    assert cli.main(["validate", str(config)]) == 2
    refused_by_validate = capsys.readouterr().err
    assert "duplicate key 'otlp'" in refused_by_validate
    marker = tmp_path / "ran"
    argv = ["observe", "-c", str(config), "-o", str(tmp_path / "run"), "--no-progress"]
    assert cli.main([*argv, "--", "touch", str(marker)]) == 2
    assert capsys.readouterr().err == refused_by_validate
    assert not marker.exists()
    assert not (tmp_path / "run").exists()
