"""The Table view fits its pane: no sideways scroll to reach a node's stable key or first seen.

A new user's Table view of a real run was about twice the pane's width: ids and stable keys
(long, without spaces) set the columns' widths, so the stable key, channels and first seen were
reached by scrolling sideways. The tables now have a fixed layout: the short columns keep a
width of their own, the label, ids and key share the rest and wrap.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from viewer.viewer_support import wait_ready

pytestmark = pytest.mark.slow

FITS = "e => [e.scrollWidth, e.clientWidth]"


def test_the_table_view_of_a_real_run_fits_its_pane(
    observed_run: Path, page: Any, tmp_path: Path
) -> None:
    html = tmp_path / "run.html"
    subprocess.run(
        [sys.executable, "-m", "otel_bridge", "view", str(observed_run), "--export", str(html)],
        check=True,
        capture_output=True,
    )
    page.goto(html.as_uri())
    wait_ready(page)
    page.evaluate("obViewer.show('table')")
    scroll, client = page.eval_on_selector("main", FITS)
    assert scroll <= client, (scroll, client)
    for table in ("#ob-node-table", "#ob-edge-table"):
        right = page.eval_on_selector(table, "e => e.getBoundingClientRect().right")
        assert right <= page.eval_on_selector("main", "e => e.getBoundingClientRect().right")
    # every cell is whole: an id wraps, it is never cut (its text is the node's id)
    rows = page.eval_on_selector_all(
        "#ob-node-table tbody tr",
        "rs => rs.map(r => [r.dataset.id, r.cells[2].innerText.replace(/\\s/g, '')])",
    )
    assert rows
    assert all(text == node_id.replace(" ", "") for node_id, text in rows), rows
    # a first seen reads as one time, wrapped (if at all) between its date and its time
    seen = page.eval_on_selector("#ob-node-table tbody tr td:nth-child(6)", "e => e.innerText")
    assert seen.replace("\n", "").endswith("Z"), seen
    assert "\n" not in seen or seen.split("\n")[1].startswith("T"), seen
