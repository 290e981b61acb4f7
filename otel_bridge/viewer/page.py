"""The page: one HTML document, either served (assets by URL) or exported (everything inline).

The exported file carries the bundle, the vendored libraries (unevaluated until the WebGL
renderer needs them), the viewer's script and its style inline, and a Content-Security-Policy
that forbids every fetch, so opening it makes no network request. The served page loads the
same files from the server (``assets/...``) and its bundle from ``data.json`` (and, when live,
``events``).
"""

from __future__ import annotations

import json
from importlib import resources
from typing import Any

from otel_bridge.viewer.data import Bundle

SCRIPTS = (
    "vendor/graphology.min.js",
    "vendor/sigma.min.js",
    "canvasgraph.js",
    "viewer.js",
)
"""The scripts of the page, in load order (paths under ``static/``)."""
LIBRARIES = frozenset({"vendor/graphology.min.js", "vendor/sigma.min.js"})
"""Scripts only the WebGL renderer needs: the exported file carries them unevaluated
(``type="text/x-ob-library"``) and the page evaluates them when it draws with WebGL."""
STYLE = "viewer.css"
EXPORT_CSP = (
    "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; "
    "img-src data:; connect-src 'none'"
)
"""The exported file's policy: inline code only, no request of any kind."""
SERVED_CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self' 'unsafe-inline'; "
    "img-src 'self' data:; connect-src 'self'"
)
"""The served page's policy (sent as a header): this server only."""
ASSET_TYPES = {".js": "text/javascript", ".css": "text/css", ".json": "application/json"}


def asset(name: str) -> bytes | None:
    """The bytes of ``static/<name>``, None for a name that is not a shipped asset."""
    if name not in {*SCRIPTS, STYLE, "vendor/VERSIONS.json"}:
        return None
    return (resources.files("otel_bridge.viewer") / "static" / name).read_bytes()


def _inline_json(value: Any) -> str:
    text = json.dumps(value, separators=(",", ":"), ensure_ascii=False)
    # Inside <script>, "</" could close the element; "<!--" could open a comment state.
    return text.replace("</", "<\\/").replace("<!--", "<\\!--")


def _inline_script(name: str) -> str:
    data = asset(name)
    assert data is not None
    text = data.decode("utf-8")
    if "</script" in text.lower() or "<!--" in text:
        raise ValueError(f"{name} cannot be inlined: it contains </script or <!--")
    if name in LIBRARIES:
        return f'<script type="text/x-ob-library" data-library="{name}">{text}</script>'
    return f"<script>{text}</script>"


def _template() -> str:
    return (resources.files("otel_bridge.viewer") / "static" / "index.html").read_text("utf-8")


def render(bundle: Bundle | None, *, title: str = "otel-bridge view") -> str:
    """The page. With a ``bundle``, the exported form (self-contained); without, the served form."""
    page = _template().replace("{{TITLE}}", _escape(title))
    if bundle is None:
        head = f'<link rel="stylesheet" href="assets/{STYLE}">'
        body = "".join(f'<script src="assets/{s}"></script>' for s in SCRIPTS)
        config = {"mode": "served"}
        csp = ""
    else:
        style = (asset(STYLE) or b"").decode("utf-8")
        head = f"<style>{style}</style>"
        body = (
            f'<script type="application/json" id="ob-bundle">{_inline_json(bundle.to_page_json())}'
            "</script>" + "".join(_inline_script(s) for s in SCRIPTS)
        )
        config = {"mode": "export"}
        csp = f'<meta http-equiv="Content-Security-Policy" content="{EXPORT_CSP}">'
    page = page.replace("{{CSP}}", csp).replace("{{HEAD}}", head)
    page = page.replace(
        "{{CONFIG}}",
        f'<script type="application/json" id="ob-config">{_inline_json(config)}</script>',
    )
    return page.replace("{{SCRIPTS}}", body)


def _escape(text: str) -> str:
    return (
        text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;").replace('"', "&quot;")
    )
