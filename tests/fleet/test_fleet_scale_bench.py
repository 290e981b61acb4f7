"""``benchmarks/fleet_scale.py`` at a tiny size: simulated agents, two real gateway processes
behind one port (``reuse_port``) and a real PostgreSQL server; every record is stored once."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

from fleet_scale import parse_args, report, run
from store.store_support import Server, pg_server

__all__ = ["pg_server"]  # the store tests' fixture (a real PostgreSQL server), shared


def test_two_gateways_store_every_span_os_event_and_observation_once(
    tmp_path: Path, pg_server: Server
) -> None:
    """What the agents shipped is in the store exactly once, split between the two gateways'
    runs, and the figures the benchmark prints come from that run."""
    url = pg_server.url(pg_server.create_database())
    size = ["--spans", "60", "--os-events", "300", "--agents", "2", "--batch", "60"]
    args = parse_args([*size, "--gateways", "2", "--progress", "1", "--db", url])
    result = run(args, url, None, str(tmp_path))
    made, counts = result["made"], result["counts"]
    assert (made["spans"], made["os_events"]) == (60, 300)
    assert made["observations"] >= 360  # every OS event gives one, every span one to three
    assert counts["ob_spans"] == 60
    assert counts["ob_logs"] == 300
    assert counts["ob_observations"] == counts["distinct_observations"] == made["observations"]
    shares = [n for k, n in counts.items() if k.startswith("observations of ")]
    assert sum(shares) == made["observations"]
    assert len(result["runs"]) == 2
    assert result["sizes"]["ob_observations"] > 0
    assert result["read"]["nodes"] > 0
    assert result["gateway_cpu"] > 0
    assert report(args, result)
