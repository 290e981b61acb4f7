"""``observe -c`` says what its file's exporters did not deliver, and where it is kept.

``otel-bridge observe -c configs/phoenix.yaml -- CMD`` with Phoenix not running: the exporter
keeps what it could not send in its persistent queue, which observe moves into the run
directory. The only word of it was a log line, "the next start with this storage sends them",
though no later ``observe`` uses that directory; the summary and report.md said nothing. The
summary now counts each delivering exporter's outcomes (``summary.json`` ``delivery``) and
warns, in the printed summary and report.md, about records not delivered.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from observe_support import observe_in

from otel_bridge.testing import free_port

CONFIG = Path(__file__).resolve().parents[2] / "configs" / "phoenix.yaml"


def test_records_kept_in_the_runs_queue_are_said(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "PHOENIX_"))}
    env["PHOENIX_COLLECTOR_ENDPOINT"] = f"http://127.0.0.1:{free_port()}"  # nobody listens
    done = observe_in(tmp_path, "true", extra=("-c", str(CONFIG)), env=env)
    assert done.returncode == 0, done.stderr
    run = tmp_path / "run"
    delivery = json.loads((run / "summary.json").read_text())["delivery"]
    phoenix = delivery["exporters"]["otlphttp/phoenix"]
    assert phoenix["delivered"] == 0, delivery
    assert phoenix["queued"] >= 1, delivery  # at least observe's own root span
    assert phoenix["storage"].startswith(str(run)), delivery
    (warning,) = delivery["warnings"]
    assert warning.startswith(f"otlphttp/phoenix did not deliver {phoenix['queued']} records")
    assert "no later `observe` sends" in warning
    assert f"warning: {warning}" in done.stderr
    assert f"**Warning:** {warning}." in (run / "report.md").read_text(encoding="utf-8")
