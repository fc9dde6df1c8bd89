"""The live page's files: the landing page (with the note, version and metrics path filled in), its
script and style, and the vendored uPlot with its licence, read once from the package."""

from __future__ import annotations

from pathlib import Path
from string import Template

from gpueff import __version__
from gpueff.web.live import LiveData

# URL path -> (file in gpueff/web/ui, Content-Type)
ASSETS = {
    "/ui/page.js": ("page.js", "text/javascript; charset=utf-8"),
    "/ui/search.js": ("search.js", "text/javascript; charset=utf-8"),
    "/ui/page.css": ("page.css", "text/css; charset=utf-8"),
    "/ui/uPlot.iife.min.js": ("vendor/uplot/uPlot.iife.min.js", "text/javascript; charset=utf-8"),
    "/ui/uPlot.min.css": ("vendor/uplot/uPlot.min.css", "text/css; charset=utf-8"),
    "/ui/LICENSE-uPlot.txt": ("vendor/uplot/LICENSE", "text/plain; charset=utf-8"),
}


UI = Path(__file__).with_name("ui")  # package data (pyproject.toml), read as plain files: importlib.resources would import tempfile, bz2 and lzma


def _read(name: str) -> bytes:
    return (UI / name).read_bytes()


def assets() -> dict[str, tuple[bytes, bytes]]:
    """URL path -> (Content-Type, body) for every file the page loads besides itself."""
    return {path: (content_type.encode(), _read(name)) for path, (name, content_type) in ASSETS.items()}


def escape_html(text: str) -> str:
    """``html.escape(text)``, without importing ``html``: its entity table costs 0.5 MB of RSS."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;").replace('"', "&quot;").replace("'", "&#x27;")


def landing_page(note: str, telemetry_path: str, traces: str = "") -> bytes:
    """The page, its banner ``note``; ``traces`` (which trace each GPU replays) in a closed
    disclosure below the banner, not in it."""
    listed = f'<details class="traces"><summary>Which trace each GPU replays</summary><p>{escape_html(traces)}</p></details>' if traces else ""
    template = Template(_read("index.html").decode())
    return template.substitute(version=escape_html(__version__), note=escape_html(note), traces=listed, telemetry_path=escape_html(telemetry_path)).encode()


class LivePage:
    """What the web server needs to serve the live page: the landing page, its files, and the data."""

    def __init__(self, live: LiveData, note: str, telemetry_path: str, traces: str = "") -> None:
        self.live = live
        self.landing = landing_page(note, telemetry_path, traces)
        self.assets = assets()
