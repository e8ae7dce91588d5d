"""A link check of a built report site: every internal link and anchor of every HTML page resolves.

``broken_links(site)`` parses each ``*.html`` of the site with the stdlib's ``html.parser``:
the ids of its elements (and ``<a name>``), and every ``href``/``src`` of its ``a``, ``link``,
``script``, ``img`` and ``iframe`` elements, plus the links charts carry in their data (the
``h``, ``i`` and ``j`` columns of each spec in the page's chart file, ``<page>.charts.js``: a
point's run, a mark's incident, an open incident: Vega follows them, mkdocs never sees them). A link with a scheme or a host
is external and skipped (nothing is fetched); every other one must name a file of the site
and, with a fragment, an id on that page. ``mkdocs build --strict`` checks the Markdown links
only: not the raw HTML tables, the theme's links or the charts'.

``unlinked_incidents(site, ids)``: the pages that name an incident (its id in their text) without
being its page, holding its anchor or linking to either.

``links_by_file(site)``: each file of the site -> the files a browser showing it fetches or may
follow (a page's links, a chart file's, the status line's): what a reader can reach, for the
checks of a store publish stopped midway (``tests/test_release.py``). It reads each kind of file
as the site writes it, not as ``flows.publish.upload_order`` scans them, so it checks that scan.
"""

from __future__ import annotations

import csv
import io
import json
import posixpath
import re
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import unquote, urlsplit

_LINKING = {"a": "href", "link": "href", "script": "src", "img": "src", "iframe": "src"}
CHARTS_SUFFIX = ".charts.js"  # flows.publish.site.CHARTS_SUFFIX
_ASSIGNMENT = "window.dumpscopeCharts = "
_CHART_LINKS = ("h", "i", "j")  # transforms.site.charts: a point's href, a mark's, an open incident's


class _Page(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.ids: set[str] = set()
        self.links: list[str] = []
        self.text: list[str] = []
        self.chart_files: list[str] = []  # the page's chart file (flows.publish.site.chart_file), as linked
        self._hidden = 0  # inside a script or a style: not text a reader sees

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if a.get("id"):
            self.ids.add(a["id"])
        if tag == "a" and a.get("name"):
            self.ids.add(a["name"])
        if (key := _LINKING.get(tag)) and a.get(key) is not None:
            self.links.append(a[key])
        if tag == "script" and (a.get("src") or "").endswith(CHARTS_SUFFIX):
            self.chart_files.append(a["src"])
        self._hidden += tag in ("script", "style")

    def handle_data(self, data):
        if not self._hidden:
            self.text.append(data)

    def handle_endtag(self, tag):
        self._hidden -= tag in ("script", "style") and self._hidden > 0


def chart_specs(page: Path, chart_files: list[str] | None = None) -> dict[str, dict]:
    """A built page's chart specs by container id, from the chart file it loads (none: {});
    ``chart_files``: the page's, when it was parsed already."""
    specs: dict[str, dict] = {}
    for src in _parsed_html(page).chart_files if chart_files is None else chart_files:
        specs.update(_chart_file_specs(page.parent / unquote(src)))
    return specs


def _chart_file_specs(chart_file: Path) -> dict[str, dict]:
    lines = chart_file.read_text(encoding="utf-8").splitlines()
    assignment = lines[1]  # flows.publish.site.charts_script: a comment, then the assignment
    assert assignment.startswith(_ASSIGNMENT) and assignment.endswith(";"), chart_file
    return json.loads(assignment.removeprefix(_ASSIGNMENT).removesuffix(";"))


def _chart_links(specs: dict[str, dict]) -> list[str]:
    """The links the charts' rows carry, as written (Vega resolves them from the page)."""
    links = []
    for spec in specs.values():
        values = spec.get("data", {}).get("values")
        if isinstance(values, str):  # the charts' data is CSV text
            for row in csv.DictReader(io.StringIO(values)):
                links += [row[c] for c in _CHART_LINKS if row.get(c)]
    return links


def _parsed_html(path: Path) -> _Page:
    page = _Page()
    page.feed(path.read_text(encoding="utf-8"))
    page.close()
    return page


def _parsed(path: Path) -> _Page:
    """The page, with the links of its charts' rows (resolved from the page, as Vega resolves them)."""
    page = _parsed_html(path)
    page.links += _chart_links(chart_specs(path, page.chart_files))
    return page


def _target(name: str, link: str) -> str | None:
    """The file of the site the link ``link`` on the page ``name`` names (None: an external link)."""
    parts = urlsplit(link)
    if parts.scheme or parts.netloc:
        return None  # external (no network here), data: and mailto: too
    path = unquote(parts.path)
    if not path:
        return name
    if path.startswith("/"):  # the 404 page links from the site's root
        return posixpath.normpath(path.lstrip("/"))
    return posixpath.normpath(posixpath.join(posixpath.dirname(name), path))


def broken_links(site: Path) -> list[str]:
    """``"page: link (why)"`` for every internal link of the site that does not resolve."""
    pages = {p.relative_to(site).as_posix(): _parsed(p) for p in sorted(site.rglob("*.html"))}
    broken = []
    for name, page in pages.items():
        for link in page.links:
            if (target := _target(name, link)) is None:
                continue
            parts = urlsplit(link)
            if target.startswith("..") or not (site / target).exists():
                broken.append(f"{name}: {link} (no file {target})")
            elif (site / target).is_dir():
                broken.append(f"{name}: {link} (a directory)")
            elif parts.fragment and target.endswith(".html") and unquote(parts.fragment) not in pages[target].ids:
                broken.append(f"{name}: {link} (no id {unquote(parts.fragment)!r} on {target})")
    return broken


_INCIDENT_ID = re.compile(r"\bI-[0-9a-f]{8}\b")


def unlinked_incidents(site: Path, ids: set[str], page_of, anchor_of) -> list[str]:
    """``"page: id"`` for each incident of ``ids`` a page names without being about it (its
    page, ``page_of(id)``: a path from the site's root; or its row, ``anchor_of(id)`` an id on
    the page) or linking to it (a link ending in its page's name, or in ``#`` and its anchor)."""
    unlinked = []
    for path in sorted(site.rglob("*.html")):
        name, page = path.relative_to(site).as_posix(), _parsed(path)
        links = [unquote(link) for link in page.links]
        for i in sorted(set(_INCIDENT_ID.findall("".join(page.text))) & ids):
            own = posixpath.basename(page_of(i))
            if name == page_of(i) or anchor_of(i) in page.ids:
                continue
            if not any(link.split("#")[0].endswith("/" + own) or link.split("#")[0] == own
                       or link.endswith("#" + anchor_of(i)) for link in links):
                unlinked.append(f"{name}: {i}")
    return unlinked


def ids_of(page: Path) -> set[str]:
    """The ids of a built page's elements."""
    return _parsed(page).ids


def links_of(page: Path) -> list[str]:
    """Every link of a built page, charts' included, as written."""
    return _parsed(page).links


STATUS_DATA = "assets/status-data.js"  # flows.publish.site.STATUS_DATA
_STATUS_ASSIGNMENT = "window.dumpscopeStatus = "


def links_by_file(site: Path) -> dict[str, set[str]]:
    """Each file of the site -> the files of the site a browser showing it fetches or may follow:
    a page's ``href``s and ``src``s, a chart file's rows' links (from its page, beside it), the
    status line's links (``assets/status-data.js``: the latest run and the charts' ends, from
    the site's root). Other files link to nothing here."""
    links: dict[str, set[str]] = {}
    for path in sorted(p for p in site.rglob("*") if p.is_file()):
        name = path.relative_to(site).as_posix()
        if name.endswith(".html"):
            written = _parsed_html(path).links
        elif name.endswith(CHARTS_SUFFIX):
            written = _chart_links(_chart_file_specs(path))
        elif name == STATUS_DATA:
            status = json.loads(path.read_text(encoding="utf-8").splitlines()[1].removeprefix(_STATUS_ASSIGNMENT).removesuffix(";"))
            hrefs = [status.get("run_href")] + [end.get("href") for end in status.get("window_ends", {}).values()]
            written = ["/" + href for href in hrefs if href]
        else:
            written = []
        links[name] = {t for link in written if (t := _target(name, link)) is not None and t != name}
    return links
