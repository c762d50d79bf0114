"""Reading a rendered report: a Markdown section or table, and the HTML page as headless Chromium
lays it out."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest


def section(md: str, heading: str) -> str:
    """The text under a heading, up to the next heading of the same or a higher level."""
    m = re.search(rf"^(#+) {re.escape(heading)}\n", md, re.M)
    assert m, heading
    level = len(m.group(1))
    rest = md[m.end():]
    end = re.search(rf"^#{{1,{level}}} ", rest, re.M)
    return rest[: end.start()] if end else rest


def table(md: str, heading: str, n: int = 0) -> list[list[str]]:
    """The n-th table under a heading, as rows of cells (header excluded)."""
    tables = re.findall(r"((?:^\|.*\|\n)+)", section(md, heading) + "\n", re.M)
    lines = tables[n].strip().splitlines()
    return [[c.strip() for c in re.split(r"(?<!\\)\|", line)[1:-1]] for line in lines[2:]]


def in_chromium(page: Path, tmp_path: Path) -> tuple[str, dict]:
    """The page in headless Chromium, 1280 x 800: its DOM once loaded, and where the headline lies
    (:data:`GEOMETRY`, run in a copy of the page). Skips without Debian's chromium."""
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        pytest.skip("Debian's chromium is not installed (apt-get install -y chromium)")
    copy = tmp_path / "page.html"
    html = page.read_text(encoding="utf-8")
    copy.write_text(html.replace("</body>", f"<script>{GEOMETRY}</script></body>"), encoding="utf-8")
    out = subprocess.run(
        [chromium, "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
         "--disable-quic", "--no-first-run", "--disable-background-networking",
         "--disable-component-update", "--disable-sync", "--window-size=1280,800",
         f"--user-data-dir={tmp_path / 'profile'}", "--virtual-time-budget=5000", "--dump-dom",
         copy.as_uri()],
        capture_output=True, text=True, timeout=120)
    found = re.search(r'<pre id="geometry">(.*?)</pre>', out.stdout)
    assert found, (out.stdout[-2000:], out.stderr[-2000:])
    return out.stdout, json.loads(found.group(1))


def assert_headline_on_first_screen(geo: dict) -> None:
    """The headline's table ends above 800 px, and its figure starts there too."""
    assert geo["width"] == 1280
    assert geo["table"]["header"] == "dataset" and geo["figure"]["plot"] == "figures/headline.png"
    assert 0 < geo["table"]["top"] < geo["table"]["bottom"] < geo["figure"]["top"] < 800, geo
    assert geo["figure"]["height"] > 150 and geo["contents"] > geo["figure"]["top"]


#: run in the page once loaded: where the headline's table and figure and the contents list lie
GEOMETRY = """
window.addEventListener('load', function () {
  var t = document.getElementById('headline'), f = document.getElementById('headline-figure');
  var tr = t.getBoundingClientRect(), fr = f.getBoundingClientRect();
  var pre = document.createElement('pre');
  pre.id = 'geometry';
  pre.textContent = JSON.stringify({
    width: window.innerWidth,
    table: {top: tr.top, bottom: tr.bottom, header: t.querySelector('th').textContent},
    figure: {top: fr.top, height: fr.height, plot: f.querySelector('img').getAttribute('data-plot')},
    contents: document.querySelector('details.toc').getBoundingClientRect().top});
  document.body.appendChild(pre);
});
"""
