"""``observe -c``: an enrich journal set in the file moves into the run directory's queue/."""

from __future__ import annotations

from pathlib import Path

from otel_bridge import rundir
from otel_bridge.commands.observe import RUN_QUEUE_DIR, durable_state_in_run


def test_enrich_journal_moves_into_the_run_directory(tmp_path: Path) -> None:
    """The path is replaced (other settings kept); an enrich without a journal is left alone."""
    run = rundir.RunDir.create(str(tmp_path / "run"))
    user = {
        "processors": {
            "enrich": {"journal": {"path": "/srv/q", "max_bytes": 4096}},
            "enrich/plain": {"hold_delay": 1},
            "enrich/empty": {"journal": {"path": ""}},
            "batch": {"journal": {"path": "/srv/other"}},
        }
    }
    moved = {(a.section, a.id): dict(a.settings) for a in durable_state_in_run(user, run)}
    assert moved == {
        ("processors", "enrich"): {"journal": {"path": run.file(RUN_QUEUE_DIR), "max_bytes": 4096}}
    }


def test_bundled_phoenix_config_has_its_enrich_journal_moved(tmp_path: Path) -> None:
    """The bundled phoenix.yaml journals enrich's hold, and observe moves it."""
    import yaml

    run = rundir.RunDir.create(str(tmp_path / "run"))
    configs = Path(__file__).resolve().parents[2] / "otel_bridge" / "configs"
    for name in ("phoenix.yaml", "jaeger.yaml"):
        user = yaml.safe_load((configs / name).read_text())
        ids = {(a.section, a.id) for a in durable_state_in_run(user, run)}
        assert ("processors", "enrich") in ids, name
