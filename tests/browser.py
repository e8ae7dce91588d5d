"""Browser-test helpers: serve a built directory, open pages in headless Chromium, check links.

Chromium is Debian's package (`make browser` installs it), driven by Playwright through
`executable_path`: Playwright's own browser download does not work on our machines.

- `serve_directory(root)`: a quiet threaded http.server on 127.0.0.1 (ephemeral port); yields the base URL.
- `open_page(url)`: loads a page, waits until every `.vega-embed` chart has drawn (or an error
  shows, or a timeout), and returns a `PageReport`: errors, title, marks per chart, links,
  dialogs the page opened (alert/confirm/prompt: dismissed and recorded), Content-Security-Policy
  violations, and what an optional `probe` (a JavaScript function) returned.
- `check_links(base_url, pages)`: same-origin links that answer HTTP >= 400.

Only requests to this machine count as errors: Chromium and some pages (web fonts) reach for
other hosts, which fail here and are no concern of the site's.
"""

from __future__ import annotations

import contextlib
import functools
import http.server
import os
import shutil
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import urldefrag, urljoin, urlsplit

# STACK.md's headless flags. Playwright adds --headless and its own temporary --user-data-dir
# (it refuses a --user-data-dir in args).
CHROMIUM_ARGS = (
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--no-first-run",
    "--disable-sync",
    "--disable-dev-shm-usage",  # what Debian's launcher adds when /dev/shm is small (CI containers)
)
LOCAL_HOSTS = frozenset({"127.0.0.1", "localhost", "[::1]", "::1"})
VIEWPORT = {"width": 1400, "height": 1000}

# Runs in the page: the state of each chart container. Data marks are the items of groups with
# role "mark" (Vega's class `mark-<type> role-mark`); axes, legends and titles are other roles and
# are not counted, so a chart whose axes drew but whose data did not has 0 marks.
_CHART_STATE_JS = """
(selector) => Array.from(document.querySelectorAll(selector)).map((el) => {
  const svg = el.querySelector('svg');
  const canvas = el.querySelector('canvas');
  let marks = 0;
  if (svg) {
    for (const g of svg.querySelectorAll('g.role-mark')) {
      if (!g.classList.contains('mark-group')) marks += g.childElementCount;
    }
  }
  let nonblank = false;
  if (canvas && canvas.width > 0 && canvas.height > 0) {
    try {
      const data = canvas.getContext('2d').getImageData(0, 0, canvas.width, canvas.height).data;
      for (let i = 3; i < data.length; i += 4) { if (data[i] !== 0) { nonblank = true; break; } }
    } catch (e) { nonblank = false; }
  }
  return {drawn: !!((svg && svg.querySelector('g')) || canvas), marks, canvas: !!canvas, nonblank};
})
"""
_TWO_FRAMES_JS = "() => new Promise((r) => requestAnimationFrame(() => requestAnimationFrame(() => r(true))))"
_LINKS_JS = "() => Array.from(document.querySelectorAll('a[href]')).map((a) => a.href)"
# Runs before any script of every page: records Content-Security-Policy violations.
_CSP_INIT_JS = """
window.__dsCspViolations = [];
document.addEventListener('securitypolicyviolation', (e) => window.__dsCspViolations.push(
  `${e.violatedDirective} blocked ${e.blockedURI || 'inline'} at ${e.sourceFile || ''}:${e.lineNumber}`));
"""
_CSP_JS = "() => window.__dsCspViolations || []"
_OWN_PROBE = "Canvas2D: Multiple readback operations using getImageData"  # _CHART_STATE_JS reads canvas pixels


def find_chromium() -> str | None:
    """Debian's chromium: $DUMPSCOPE_CHROMIUM, else `chromium` on PATH, else /usr/bin/chromium."""
    for candidate in (os.environ.get("DUMPSCOPE_CHROMIUM"), shutil.which("chromium"), "/usr/bin/chromium"):
        if candidate and os.access(candidate, os.X_OK):
            return candidate
    return None


def _is_local(url: str) -> bool:
    parts = urlsplit(url)
    return parts.scheme in {"http", "https", "ws", "wss"} and parts.hostname in LOCAL_HOSTS


@dataclass
class PageReport:
    url: str
    title: str = ""
    console_errors: list[str] = field(default_factory=list)  # errors and warnings
    charts: int = 0  # `.vega-embed` containers
    chart_marks: list[int] = field(default_factory=list)  # data marks drawn (SVG) per chart
    svg_marks: int = 0  # sum of chart_marks
    canvas_nonblank: int = 0  # canvas-rendered charts with any non-transparent pixel
    undrawn_charts: int = 0  # containers with no svg/canvas when waiting stopped
    links: list[str] = field(default_factory=list)  # absolute hrefs of <a>, as the browser resolved them
    dialogs: list[str] = field(default_factory=list)  # "<type>: <message>" of each alert/confirm/prompt
    csp_violations: list[str] = field(default_factory=list)  # "<directive> blocked <what> at <where>"
    probe: object = None  # what the `probe` function returned
    seconds: float = 0.0


class Browser:
    """One headless Chromium (a Playwright session) and the browser context its pages share."""

    def __init__(self, executable: str | None = None) -> None:
        executable = executable or find_chromium()
        if executable is None:
            raise RuntimeError(
                "Chromium is not installed: run `make browser` (apt-get install chromium) "
                "or set DUMPSCOPE_CHROMIUM to a chromium binary"
            )
        from playwright.sync_api import sync_playwright

        self._pw = sync_playwright().start()
        try:
            self._browser = self._pw.chromium.launch(
                executable_path=executable, headless=True, args=list(CHROMIUM_ARGS)
            )
        except Exception:
            self._pw.stop()
            raise
        self.version = self._browser.version
        # One tab for all pages: the HTTP and compiled-code caches, and no new tab each time, make a
        # page after the first ~3x faster (the 900 KB vega bundle is compiled once).
        # `isolated=True` gets a fresh context (no cache, no storage) instead.
        self._page = self._new_context().new_page()

    def _new_context(self):
        context = self._browser.new_context(viewport=VIEWPORT)
        context.add_init_script(_CSP_INIT_JS)
        return context

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self._browser.close()
        self._pw.stop()

    def open_page(
        self,
        url: str,
        *,
        screenshot: Path | None = None,
        timeout: float = 10.0,
        chart_selector: str = ".vega-embed",
        isolated: bool = False,
        probe: str | None = None,
    ) -> PageReport:
        """Load `url`; wait for every chart to draw (or an error, or `timeout` s); report.

        `probe`, a JavaScript function, runs in the page once the charts drew; its result
        (JSON-serializable) is `report.probe`.

        A chart container is an element matching `chart_selector`. vegaEmbed adds the class
        `vega-embed` only when it starts drawing, so a page whose charts may fail should give
        its containers that class itself (or use another selector) to have them counted.
        """
        started = time.perf_counter()
        report = PageReport(url=url)
        errors = report.console_errors
        inflight: set[object] = set()
        answered_badly: set[str] = set()  # Chromium also aborts a script that got a 404: say it once

        def on_console(msg) -> None:
            # A warning is a finding too (Vega warns of an infinite extent when a layer draws no
            # data). Network failures come through the request events below, filtered by host;
            # Chromium's hint on repeated canvas reads is about this harness's own pixel probe.
            if msg.type in ("error", "warning") and not msg.text.startswith(("Failed to load resource", _OWN_PROBE)):
                where = msg.location.get("url") or url
                kind = "console" if msg.type == "error" else "console warning"
                errors.append(f"{kind}: {msg.text} ({where}:{msg.location.get('lineNumber', 0)})")

        def on_request(req) -> None:
            if _is_local(req.url):
                inflight.add(req)

        def on_done(req) -> None:
            inflight.discard(req)

        def on_failed(req) -> None:
            inflight.discard(req)
            if _is_local(req.url) and req.url not in answered_badly:
                errors.append(f"request failed: {req.method} {req.url}: {req.failure}")

        def on_response(resp) -> None:
            if resp.status >= 400 and _is_local(resp.url):
                answered_badly.add(resp.url)
                errors.append(f"HTTP {resp.status}: {resp.request.method} {resp.url}")

        def on_dialog(dialog) -> None:
            report.dialogs.append(f"{dialog.type}: {dialog.message}")
            with contextlib.suppress(Exception):
                dialog.dismiss()

        if isolated:
            context = self._new_context()
            page = context.new_page()
        else:
            if self._page.is_closed():  # the tab crashed or a test closed it
                self._page = self._page.context.new_page()
            context, page = None, self._page
        listeners = {
            "console": on_console,
            "pageerror": lambda exc: errors.append(f"page error: {exc}"),
            "request": on_request,
            "requestfinished": on_done,
            "requestfailed": on_failed,
            "response": on_response,
            "dialog": on_dialog,
        }
        for event, listener in listeners.items():
            page.on(event, listener)
        try:
            try:
                page.goto(url, wait_until="load", timeout=timeout * 1000)
            except Exception as exc:  # noqa: BLE001 - a page that does not load is a finding
                errors.append(f"navigation: {exc}")
                return report
            states = self._wait_for_charts(page, chart_selector, inflight, errors, started + timeout)
            report.title = page.title()
            report.charts = len(states)
            report.chart_marks = [s["marks"] for s in states]
            report.svg_marks = sum(report.chart_marks)
            report.canvas_nonblank = sum(1 for s in states if s["canvas"] and s["nonblank"])
            report.undrawn_charts = sum(1 for s in states if not s["drawn"])
            report.links = page.evaluate(_LINKS_JS)
            report.csp_violations = page.evaluate(_CSP_JS)
            if probe is not None:
                report.probe = page.evaluate(probe)
            if screenshot is not None:
                Path(screenshot).parent.mkdir(parents=True, exist_ok=True)
                page.screenshot(path=str(screenshot), full_page=True)
        finally:
            report.seconds = time.perf_counter() - started
            if context is not None:
                context.close()
            else:
                for event, listener in listeners.items():
                    page.remove_listener(event, listener)
                # Leave the shared tab blank, so nothing of this page (timers, late requests) runs on.
                with contextlib.suppress(Exception):
                    page.goto("about:blank")
        return report

    @staticmethod
    def _wait_for_charts(page, selector: str, inflight: set, errors: list[str], deadline: float) -> list[dict]:
        # Charts draw asynchronously after `load`. Stop when all have drawn and the local
        # network is quiet; or soon after an error (a failed chart never draws: do not sit out
        # the whole timeout); or at the deadline.
        errors_seen_at = None
        while True:
            states = page.evaluate(_CHART_STATE_JS, selector)
            if all(s["drawn"] for s in states) and not inflight:
                page.evaluate(_TWO_FRAMES_JS)  # let the renderer paint what it just built
                return page.evaluate(_CHART_STATE_JS, selector)
            now = time.perf_counter()
            if errors_seen_at is None and errors:
                errors_seen_at = now
            if now >= deadline or (errors_seen_at is not None and now - errors_seen_at > 0.5):
                return states
            page.wait_for_timeout(50)


_shared: Browser | None = None


def get_browser() -> Browser:
    """The process-wide browser (launched on first use; `close_browser` ends it)."""
    global _shared
    if _shared is None:
        _shared = Browser()
    return _shared


def close_browser() -> None:
    global _shared
    if _shared is not None:
        _shared.close()
        _shared = None


def open_page(url: str, *, screenshot: Path | None = None, browser: Browser | None = None, **options) -> PageReport:
    """`Browser.open_page` on `browser`, or on the process-wide one."""
    return (browser or get_browser()).open_page(url, screenshot=screenshot, **options)


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format, *args) -> None:
        pass


@contextlib.contextmanager
def serve_directory(root: Path) -> Iterator[str]:
    """Serve `root` on 127.0.0.1 at an ephemeral port; yields the base URL (ending in '/')."""
    handler = functools.partial(_QuietHandler, directory=str(root))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    server.daemon_threads = True
    # A short poll interval: shutdown() waits for it (0.5 s by default).
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


class _LinkParser(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.hrefs: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "a":
            href = dict(attrs).get("href")
            if href:
                self.hrefs.append(href)


def _fetch(url: str, timeout: float) -> tuple[int, str, bytes]:
    """(status, content type, body); status 0 when the server did not answer."""
    try:
        with urllib.request.urlopen(url, timeout=timeout) as resp:
            return resp.status, resp.headers.get_content_type(), resp.read()
    except urllib.error.HTTPError as exc:
        return exc.code, "", b""
    except (urllib.error.URLError, OSError):
        return 0, "", b""


def check_links(
    base_url: str, pages: Iterable[str | PageReport], *, crawl: bool = False, timeout: float = 5.0
) -> list[str]:
    """Broken same-origin links on `pages`: '<page> -> <target>: HTTP <status>' for each.

    A page is a URL, a path relative to `base_url`, or a `PageReport` (its links as the browser
    saw them). Pages given as URLs are fetched and their <a href> parsed (static HTML).
    Fragments are ignored (only the document is fetched), and so are other origins, mailto: and
    javascript:. With `crawl`, same-origin HTML pages that are linked are checked too.
    """
    origin = urlsplit(base_url)[:2]
    status: dict[str, int] = {}
    broken: list[str] = []
    queue: list[tuple[str, list[str]]] = []

    def visit(url: str) -> list[str] | None:
        """Fetch a page; its hrefs if it is HTML, else None."""
        code, ctype, body = _fetch(url, timeout)
        status[url] = code
        if not 0 < code < 400 or ctype != "text/html":
            return None
        parser = _LinkParser()
        parser.feed(body.decode("utf-8", "replace"))
        return parser.hrefs

    for page in pages:
        if isinstance(page, PageReport):
            queue.append((urldefrag(page.url).url, page.links))
            continue
        url = urldefrag(urljoin(base_url, page)).url
        hrefs = visit(url)
        if not 0 < status[url] < 400:
            broken.append(f"{url}: HTTP {status[url] or 'no answer'}")
        queue.append((url, hrefs or []))
    queued = {url for url, _ in queue}
    while queue:
        page_url, hrefs = queue.pop(0)
        for href in hrefs:
            target = urldefrag(urljoin(page_url, href)).url
            if urlsplit(target)[:2] != origin:
                continue
            if target not in status:
                target_hrefs = visit(target)
                if crawl and target_hrefs is not None and target not in queued:
                    queued.add(target)
                    queue.append((target, target_hrefs))
            if not 0 < status[target] < 400:
                broken.append(f"{page_url} -> {href}: HTTP {status[target] or 'no answer'}")
    return broken
