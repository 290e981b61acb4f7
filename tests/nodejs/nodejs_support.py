"""Shared by the Node.js tests: the agent in ``agent/``, installed once per session.

``agent/`` holds ``agent.js`` (the official OpenTelemetry JS SDK only, ``@opentelemetry/sdk-node``,
configured from the environment), its ``package.json`` with pinned versions and its
``package-lock.json``. :func:`installed_agent` copies the three files to a temporary directory
and runs ``npm ci`` there, once per session; npm keeps the downloaded packages in its own cache
(``~/.npm``), so a later session installs without the network. It skips, with the reason, when
``node`` or ``npm`` is missing, ``node`` is older than the SDK supports, or the npm registry
cannot be reached; any other ``npm ci`` failure fails the test that asked.

Importing this module also puts ``tests/observe`` and ``tests/standing`` on ``sys.path`` for
their helpers (``observe_support``, ``standing_support``).
"""

from __future__ import annotations

import atexit
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parents[1]
AGENT_SOURCE = Path(__file__).resolve().parent / "agent"
for _folder in ("observe", "standing"):
    if str(TESTS / _folder) not in sys.path:
        sys.path.insert(0, str(TESTS / _folder))

NODE_SUPPORTED = "^18.19.0 || >=20.6.0"
"""The Node.js versions the pinned SDK (``@opentelemetry/sdk-node`` 0.223.0) declares: the last
line that runs on Node.js 18 and 20 (0.300 needs 22.15)."""

_FILES = ("agent.js", "package.json", "package-lock.json")
_NETWORK = re.compile(
    r"\b(ENOTFOUND|EAI_AGAIN|ECONNREFUSED|ECONNRESET|ETIMEDOUT|ENETUNREACH|EHOSTUNREACH"
    r"|ERR_SOCKET_TIMEOUT|network request|request to \S+ failed)\b"
)
_outcome: dict[str, Path | str] = {}
"""The session's one install (key ``agent``): the agent's path, or why every Node.js test skips."""


def _node_problem() -> str | None:
    """Why node and npm cannot run the agent here, or None."""
    node, npm = shutil.which("node"), shutil.which("npm")
    if node is None or npm is None:
        missing = " and ".join(n for n, p in (("node", node), ("npm", npm)) if p is None)
        return f"needs Node.js ({NODE_SUPPORTED}) and npm: no {missing} on PATH"
    version = subprocess.run(
        [node, "--version"], capture_output=True, text=True, timeout=30, check=False
    ).stdout.strip()
    found = re.match(r"v(\d+)\.(\d+)", version)
    at = (int(found[1]), int(found[2])) if found else (0, 0)
    if not ((18, 19) <= at < (19, 0) or at >= (20, 6)):
        return f"needs Node.js {NODE_SUPPORTED}; node --version says {version!r}"
    return None


def _install() -> Path | str:
    """Install the agent in a new temporary directory: its path, or why not (a skip reason)."""
    problem = _node_problem()
    if problem is not None:
        return problem
    where = Path(tempfile.mkdtemp(prefix="otel-bridge-node-agent-"))
    atexit.register(shutil.rmtree, where, ignore_errors=True)
    for name in _FILES:
        shutil.copyfile(AGENT_SOURCE / name, where / name)
    npm = shutil.which("npm")
    assert npm is not None
    # --ignore-scripts: nothing the agent needs runs at install (protobufjs's postinstall only
    # checks versions); the fetch settings give an unreachable registry up within a minute.
    cmd = [npm, "ci", "--ignore-scripts", "--no-audit", "--no-fund", "--prefer-offline"]
    cmd += ["--fetch-retries=1", "--fetch-timeout=20000"]
    cmd += ["--fetch-retry-mintimeout=1000", "--fetch-retry-maxtimeout=5000"]
    done = subprocess.run(cmd, cwd=where, capture_output=True, text=True, timeout=300, check=False)
    if done.returncode == 0:
        return where / "agent.js"
    output = done.stdout + done.stderr
    said = [line for line in output.splitlines() if _NETWORK.search(line)]
    if said:
        fetch = [line for line in said if "FetchError" in line] or said
        return f"the npm registry is unreachable ({fetch[0].removeprefix('npm error ').strip()})"
    pytest.fail(f"npm ci failed ({done.returncode}) in {where}:\n{output}")


def installed_agent() -> Path:
    """``agent.js`` with its packages installed beside it (see the module docstring)."""
    if "agent" not in _outcome:
        _outcome["agent"] = _install()
    outcome = _outcome["agent"]
    if isinstance(outcome, str):
        pytest.skip(outcome)
    return outcome
