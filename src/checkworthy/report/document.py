"""The report as a document of blocks, rendered to Markdown and to a self-contained HTML page.

:mod:`checkworthy.report.render` builds a list of blocks from stored rows; this module turns that
list into text. Both renderings come from the same blocks, so the Markdown and the HTML page
always say the same thing. Cell and paragraph text use a small inline Markdown subset
(```code```, ``**bold**``, backslash escapes; :func:`esc` escapes free text such as claims), which
the HTML renderer converts itself: no Markdown library is involved.

The HTML page is self-contained: its CSS is inline and each figure is embedded as a base64
``data:`` URI, so the single file can be mailed or attached to a ticket. A short script
checks on load that every figure decoded and records the result on ``<body>``
(``data-plots-loaded`` / ``data-plots-total``), showing a warning if one did not; the tests
read that attribute from headless Chromium. A :class:`Fold` is a ``<details>`` element in both
renderings (GitHub shows Markdown inside one), so detail can follow the first screen closed; the
contents list goes where the :class:`Contents` block stands, and following one of its links
opens the folds around the target.
"""

from __future__ import annotations

import base64
import html
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Heading:
    """A section heading (level 1-4)."""

    level: int
    text: str


@dataclass(frozen=True)
class Para:
    """A paragraph of inline Markdown."""

    text: str


@dataclass(frozen=True)
class Bullets:
    """A bulleted list; each item is inline Markdown."""

    items: Sequence[str]


@dataclass(frozen=True)
class Table:
    """A table; cells are inline Markdown. ``caption`` is rendered as a paragraph above it; ``name``,
    if given, is the HTML element's id (the page's style and tests find it by that)."""

    header: Sequence[str]
    rows: Sequence[Sequence[str]]
    caption: str = ""
    name: str = ""


@dataclass(frozen=True)
class Image:
    """A figure: ``path`` relative to the report directory (e.g. ``figures/f1_vs_k.png``); ``name``
    as :class:`Table`'s."""

    path: str
    alt: str
    name: str = ""


@dataclass(frozen=True)
class Contents:
    """Where the HTML page lists its headings (folded); nothing in Markdown, whose viewers list them."""


@dataclass(frozen=True)
class Fold:
    """Blocks shown closed under a one-line ``summary`` (inline Markdown): ``<details>``."""

    summary: str
    blocks: Sequence[Block]


Block = Heading | Para | Bullets | Table | Image | Contents | Fold


@dataclass
class Document:
    """A titled list of blocks."""

    title: str
    blocks: list[Block] = field(default_factory=list)

    def add(self, *blocks: Block) -> None:
        self.blocks.extend(blocks)


_ESCAPE = re.compile(r"([\\`*_\[\]<>|~#])")
_NUM = re.compile(r"^[−+-]?(\d[\d,]*(\.\d+)?%?|—|nan)( ± [\d.]+)?$")


def esc(value: object) -> str:
    """Free text (a claim, a source id) as inline Markdown: one line, specials escaped."""
    return _ESCAPE.sub(r"\\\1", " ".join(str(value).split()))


def code(value: object) -> str:
    """Inline code; backticks in the value are replaced so the span cannot break."""
    return "`" + " ".join(str(value).split()).replace("`", "'") + "`"


# ---- Markdown ---------------------------------------------------------------------------------


_BARE_PIPE = re.compile(r"(?<!\\)\|")


def _md_row(cells: Sequence[str]) -> str:
    """A table row; a pipe inside a cell (even in code) must be escaped in GFM tables."""
    return "| " + " | ".join(_BARE_PIPE.sub(r"\\|", c.replace("\n", " ")) for c in cells) + " |"


def to_markdown(doc: Document) -> str:
    """GitHub-flavoured Markdown; ends with one newline."""
    return "\n\n".join([f"# {doc.title}", *_md_blocks(doc.blocks)]) + "\n"


def _md_blocks(blocks: Sequence[Block]) -> list[str]:
    out: list[str] = []
    for b in blocks:
        if isinstance(b, Fold):  # blank lines around the content: GitHub renders it as Markdown
            out.append(f"<details>\n<summary>{inline_html(b.summary)}</summary>")
            out += _md_blocks(b.blocks)
            out.append("</details>")
        elif isinstance(b, Heading):
            out.append("#" * b.level + " " + b.text)
        elif isinstance(b, Para):
            out.append(b.text)
        elif isinstance(b, Bullets):
            out.append("\n".join(f"- {item}" for item in b.items))
        elif isinstance(b, Table):
            lines = [b.caption, ""] if b.caption else []
            lines += [_md_row(b.header), "|" + "|".join("---" for _ in b.header) + "|"]
            lines += [_md_row(r) for r in b.rows]
            out.append("\n".join(lines))
        elif isinstance(b, Image):
            out.append(f"![{esc(b.alt)}]({b.path})")
    return out


# ---- HTML -------------------------------------------------------------------------------------


def inline_html(text: str) -> str:
    """Inline Markdown subset to HTML: backslash escapes, `code`, **bold**; the rest escaped."""
    out: list[str] = []
    i, n, bold = 0, len(text), False
    while i < n:
        ch = text[i]
        if ch == "\\" and i + 1 < n:
            out.append(html.escape(text[i + 1]))
            i += 2
        elif ch == "`":
            j = text.find("`", i + 1)
            if j < 0:
                out.append("`")
                i += 1
            else:
                out.append(f"<code>{html.escape(text[i + 1:j])}</code>")
                i = j + 1
        elif text.startswith("**", i):
            out.append("</strong>" if bold else "<strong>")
            bold = not bold
            i += 2
        else:
            out.append(html.escape(ch))
            i += 1
    if bold:
        out.append("</strong>")
    return "".join(out)


def _anchor(text: str, seen: dict[str, int]) -> str:
    base = re.sub(r"[^a-z0-9]+", "-", re.sub(r"\\(.)", r"\1", text).lower()).strip("-") or "section"
    seen[base] = seen.get(base, 0) + 1
    return base if seen[base] == 1 else f"{base}-{seen[base]}"


CSS = """
body{font-family:-apple-system,"Segoe UI",Helvetica,Arial,sans-serif;margin:0;color:#1f2328;
background:#fff;line-height:1.45}
main{max-width:1180px;margin:0 auto;padding:24px 32px 64px}
h1{border-bottom:2px solid #d0d7de;padding-bottom:6px}
h2{border-bottom:1px solid #d0d7de;padding-bottom:4px;margin-top:40px}h1+h2{margin-top:16px}
h3{margin-top:28px}h4{margin-top:20px}
table{border-collapse:collapse;margin:8px 0 16px;font-size:13px}
th,td{border:1px solid #d0d7de;padding:3px 8px;vertical-align:top}
th{background:#f6f8fa;text-align:left}td.num{text-align:right;font-variant-numeric:tabular-nums}
tr:nth-child(even) td{background:#fbfcfd}#headline td{white-space:nowrap}
code{background:#f2f4f6;padding:0 3px;border-radius:3px;font-size:90%;word-break:break-all}
figure{margin:12px 0 20px}figure img{max-width:100%;border:1px solid #eaeef2}
figcaption{font-size:12px;color:#57606a}
details{border:1px solid #d0d7de;border-radius:4px;margin:10px 0;padding:0 16px}
details>summary{cursor:pointer;font-weight:600;padding:6px 0}
details.toc{background:#f6f8fa;font-size:13px}details.toc ul{margin:4px 0;padding-left:18px}
details.fold>h2:first-of-type{margin-top:8px}
#plot-warning{display:none;background:#ffebe9;border:1px solid #ff8182;padding:8px;margin:8px 0}
"""

SCRIPT = """
function openTo(hash) {
  var el = hash.length > 1 ? document.getElementById(decodeURIComponent(hash.slice(1))) : null;
  var target = el;
  for (; el; el = el.parentElement) { if (el.tagName === 'DETAILS') { el.open = true; } }
  if (target) { target.scrollIntoView(); }
}
window.addEventListener('hashchange', function () { openTo(location.hash); });
window.addEventListener('load', function () {
  openTo(location.hash);
  var imgs = document.querySelectorAll('img[data-plot]'), ok = 0;
  imgs.forEach(function (im) { if (im.complete && im.naturalWidth > 0) { ok++; } });
  document.body.setAttribute('data-plots-loaded', String(ok));
  document.body.setAttribute('data-plots-total', String(imgs.length));
  if (ok < imgs.length) {
    var w = document.getElementById('plot-warning');
    w.textContent = (imgs.length - ok) + ' of ' + imgs.length + ' figures failed to load.';
    w.style.display = 'block';
  }
});
"""


def to_html(doc: Document, images: Mapping[str, bytes]) -> str:
    """One self-contained HTML page: inline CSS, figures as base64 data URIs, a folded contents list."""
    toc: list[tuple[int, str, str]] = []
    body = _html_blocks(doc.blocks, images, {}, toc)
    nav = [f'<details class="toc"><summary>Contents ({len(toc)} sections)</summary><nav><ul>']
    for level, anchor, label in toc:
        nav.append(f'<li style="margin-left:{(level - 2) * 16}px"><a href="#{anchor}">{label}</a></li>')
    nav.append("</ul></nav></details>")
    title = inline_html(doc.title)
    plain_title = html.escape(re.sub(r"\\(.)|[`*]", lambda m: m.group(1) or "", doc.title))
    return "\n".join([
        "<!DOCTYPE html>",
        '<html lang="en">',
        "<head>",
        '<meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<title>{plain_title}</title>",
        f"<style>{CSS}</style>",
        "</head>",
        "<body>",
        "<main>",
        f"<h1>{title}</h1>",
        '<div id="plot-warning"></div>',
        *["".join(nav) if part is _CONTENTS else part for part in body],
        "</main>",
        f"<script>{SCRIPT}</script>",
        "</body>",
        "</html>",
        "",
    ])


_CONTENTS = object()  # where the contents list goes, filled in once every heading is known


def _html_blocks(blocks: Sequence[Block], images: Mapping[str, bytes], seen: dict[str, int],
                 toc: list[tuple[int, str, str]]) -> list[Any]:
    """The blocks as HTML fragments (and :data:`_CONTENTS`), collecting headings into ``toc``."""
    body: list[Any] = []
    for b in blocks:
        if isinstance(b, Contents):
            body.append(_CONTENTS)
        elif isinstance(b, Fold):
            body.append(f'<details class="fold"><summary>{inline_html(b.summary)}</summary>')
            body += _html_blocks(b.blocks, images, seen, toc)
            body.append("</details>")
        elif isinstance(b, Heading):
            anchor = _anchor(b.text, seen)
            if b.level <= 3:
                toc.append((b.level, anchor, inline_html(b.text)))
            body.append(f'<h{b.level} id="{anchor}">{inline_html(b.text)}</h{b.level}>')
        elif isinstance(b, Para):
            body.append(f"<p>{inline_html(b.text)}</p>")
        elif isinstance(b, Bullets):
            body.append("<ul>" + "".join(f"<li>{inline_html(i)}</li>" for i in b.items) + "</ul>")
        elif isinstance(b, Table):
            body.append(_html_table(b))
        elif isinstance(b, Image):
            data = images.get(b.path)
            src = "data:image/png;base64," + base64.b64encode(data).decode("ascii") if data else ""
            body.append(f'<figure{_id(b.name)}><img data-plot="{html.escape(b.path)}" src="{src}" '
                        f'alt="{html.escape(b.alt)}"><figcaption>{html.escape(b.alt)}</figcaption></figure>')
    return body


def _id(name: str) -> str:
    return f' id="{html.escape(name)}"' if name else ""


def _html_table(b: Table) -> str:
    """A table (its caption a paragraph above it); numbers right-aligned."""
    head = "".join(f"<th>{inline_html(h)}</th>" for h in b.header)
    rows = []
    for r in b.rows:
        cells = "".join(f'<td class="num">{inline_html(c)}</td>' if _NUM.match(c.strip()) else
                        f"<td>{inline_html(c)}</td>" for c in r)
        rows.append(f"<tr>{cells}</tr>")
    table = f"<table{_id(b.name)}><thead><tr>{head}</tr></thead><tbody>{''.join(rows)}</tbody></table>"
    return f"<p>{inline_html(b.caption)}</p>\n{table}" if b.caption else table
