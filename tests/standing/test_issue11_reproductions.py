"""Issue 11, reproductions 1, 5 (the README half), 7 (the documentation half) and 9 as tests.

Every reproduction, with the tests that run it, is a row of ``tests/REPRODUCTIONS.md``
(``tests/test_reproductions_table.py`` keeps that table in step with the suite).
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

from standing_support import REPO, subprocess_env

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "otlp"))
from certs import make_certs

# Top-level modules only the optional extras (dev, examples, phoenix) install: the core must run
# without them (reproduction 1: `pip install .` then `--help` failed on a missing module).
EXTRA_ONLY = (
    "opentelemetry.exporter",
    "psycopg",
    "autogen_agentchat",
    "autogen_core",
    "autogen_ext",
    "langgraph",
    "langchain_core",
    "openinference",
    "openai",
    "phoenix",
    "playwright",
    "hypothesis",
    "pytest",
)

BLOCKED_CLI = """
import importlib.abc, sys
blocked = {blocked!r}
class Block(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if any(name == b or name.startswith(b + ".") for b in blocked):
            raise ModuleNotFoundError(f"No module named {{name!r}} (an extra: blocked)")
        return None
sys.meta_path.insert(0, Block())
from otel_bridge.cli import main
sys.exit(main(sys.argv[1:]))
"""


def _cli(*argv: str, cwd: Path, **env: str) -> subprocess.CompletedProcess[str]:
    code = BLOCKED_CLI.format(blocked=EXTRA_ONLY)
    return subprocess.run(
        [sys.executable, "-c", code, *argv],
        cwd=cwd,
        env=subprocess_env(**env),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_base_install_commands_work_without_any_extra(tmp_path: Path) -> None:
    """Reproduction 1: with every extra-only module unimportable, --help, components, validate
    of each bundled config and an observe of a shell command work."""
    for command in ("--help", "components"):
        done = _cli(command, cwd=tmp_path)
        assert done.returncode == 0, done.stderr
    certs = make_certs(tmp_path)
    fleet = {  # what docs/deployment.md says agent.yaml and gateway.yaml read
        "OTEL_BRIDGE_GATEWAY_ENDPOINT": "gateway.example:4317",
        "OTEL_BRIDGE_GATEWAY_CA": str(certs.ca),
        "OTEL_BRIDGE_GATEWAY_CERT": str(certs.server),
        "OTEL_BRIDGE_GATEWAY_KEY": str(certs.server_key),
        "OTEL_BRIDGE_GATEWAY_TOKEN": "t" * 32,
    }
    fleet["OTEL_BRIDGE_DB_URL"] = "postgresql://u@127.0.0.1/db"
    fleet["OTEL_BRIDGE_GATEWAY_RUN"] = "r1"
    for config in sorted((REPO / "configs").glob("*.yaml")):
        done = _cli("validate", str(config), cwd=tmp_path, **fleet)
        if config.name == "gateway-postgres.yaml":  # the store needs the postgres extra
            assert done.returncode == 2, done.stderr
            assert "pip install 'otel-bridge[postgres]'" in done.stderr
            continue
        assert done.returncode == 0, done.stderr
    run = tmp_path / "run"
    observe = ("observe", "--no-progress", "-o", str(run), "--", "sh", "-c", "echo x > f; exit 3")
    done = _cli(*observe, cwd=tmp_path)
    assert done.returncode == 3, done.stderr
    assert (tmp_path / "f").read_text() == "x\n"
    assert json.loads((run / "summary.json").read_text())["exit_code"] == 3


def _doc_lines() -> list[tuple[str, str]]:
    """The lines of the two READMEs a new user reads first."""
    return [
        (str(path.relative_to(REPO)), line)
        for path in (REPO / "README.md", REPO / "examples" / "README.md")
        for line in path.read_text(encoding="utf-8").splitlines()
    ]


def test_documented_export_commands_name_their_output() -> None:
    """Reproduction 7: the README's ``export`` line lacked its required ``-o``."""
    lines = [(doc, line) for doc, line in _doc_lines() if re.search(r"otel-bridge export ", line)]
    assert lines
    for doc, line in lines:
        assert re.search(r"(-o|--output) ", line), (doc, line)


def test_documented_variables_are_read_by_the_code_or_a_bundled_config() -> None:
    """Reproduction 7: examples/README.md named an environment variable no config read."""
    named = {v for _, line in _doc_lines() for v in re.findall(r"\bOTEL_BRIDGE_[A-Z_]+\b", line)}
    assert named
    sources = [
        *(p.read_text(encoding="utf-8") for p in (REPO / "otel_bridge").rglob("*.py")),
        *(p.read_text(encoding="utf-8") for p in (REPO / "configs").glob("*.yaml")),
    ]
    for variable in sorted(named):
        assert any(variable in text for text in sources), variable


def test_readme_says_what_each_privilege_gives() -> None:
    """Reproduction 5: the README said nothing about privileges. Its Privileges section has a row
    for root, each capability a backend needs, ptrace and a plain user, and says that ``auto``
    chooses per plane."""
    text = (REPO / "README.md").read_text(encoding="utf-8")
    section = text.split("\n## Privileges\n", 1)[1].split("\n## ", 1)[0]
    rows = [line.split("|")[1].strip() for line in section.splitlines() if line.startswith("| ")]
    for privilege in ("root", "CAP_SYS_ADMIN", "CAP_BPF", "ptrace", "none"):
        assert any(row.startswith(privilege) for row in rows), (privilege, rows)
    assert "per plane" in section


OBSERVE_IMPORTS = """
import json, sys
from otel_bridge.cli import main
code = main(["observe", "--no-progress", "--no-forward", "-o", sys.argv[1], "--", "true"])
print(json.dumps(sorted(sys.modules)))
sys.exit(code)
"""

NOT_ON_THE_OBSERVE_PATH = (
    "otel_bridge.exporters.otlp",  # the gRPC/HTTP OTLP exporters: only to forward
    "otel_bridge.processors.enrich",
    "otel_bridge.processors.batch",
    "otel_bridge.processors.memory_limiter",
    "otel_bridge.exporters.debug",
    "otel_bridge.receivers.host.portable",  # the backends not chosen (linux works here)
    "otel_bridge.receivers.host.strace",
    "otel_bridge.receivers.host.ebpf",
    "psutil",
    "watchdog",
)


def test_observe_imports_only_the_components_its_run_names(tmp_path: Path) -> None:
    """Reproduction 9 (the part a test can hold on a loaded machine; the times are in
    BENCHMARKS.md): ``observe -- true`` with the linux backend imports no component module its
    configuration does not name and no backend it does not run; those imports were most of
    observe's fixed cost."""
    done = subprocess.run(
        [sys.executable, "-c", OBSERVE_IMPORTS, str(tmp_path / "run")],
        cwd=tmp_path,
        env=subprocess_env(),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    loaded = set(json.loads(done.stdout.splitlines()[-1]))
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    unexpected = loaded & set(NOT_ON_THE_OBSERVE_PATH)
    if summary["host_backend_name"] != "linux":  # another backend runs here: it is imported
        unexpected = {m for m in unexpected if not m.startswith("otel_bridge.receivers.host")}
        unexpected -= {"psutil", "watchdog"}
    assert not unexpected, sorted(unexpected)
