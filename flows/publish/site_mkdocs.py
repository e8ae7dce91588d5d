"""The site's mkdocs build, incremental: only pages whose Markdown changed are built again.

``build(config_file, out)`` builds the mkdocs project ``config_file`` names (the one
``flows.publish.site`` renders) into ``<out>.next`` and swaps it in place of ``out``
atomically, as a full build did. When ``out`` holds a previous build of the same global
inputs (its manifest, ``MANIFEST``, names the same ``build_key``: templates, theme, hooks,
mkdocs.yml with its nav, the versions of Dumpscope, mkdocs and Markdown), the build is
dirty (mkdocs' ``build(dirty=True)``):

- a page whose Markdown hashes as the manifest says, and a static file whose bytes equal
  the published copy's, are hard-linked from ``out`` into the staging directory, and their
  source gets the published file's mtime, so mkdocs' ``File.is_modified`` skips them. Every
  other page and file is absent from staging: mkdocs writes it as a new file. A hard-linked
  file is never written (checked after the build: the published site is never modified in
  place while readers may hold it). Pages and files that left the site are not linked, so
  they are not in the new one; the 404 page, the sitemap and the search index are always
  written anew.
- the search index (material's search plugin indexes only the pages it built) gets the
  carried pages' entries from the published index, in the order a full build writes them.
- mkdocs' warning that a dirty build may have stale navigation is filtered (that message
  only; ``--strict`` still aborts on any other warning): the site's navigation lists only
  top-level pages, and a change to it changes mkdocs.yml, hence the key.

No previous site, no manifest, a damaged manifest or another key: a full build.

A page whose front matter says ``index_lead: true`` (an incident, a run, a series: a thousand
pages of tables) is not parsed by the search plugin (``search: exclude``); it is one entry of
the index, what heads it (its HTML up to its first section, read by the search plugin's own
``SearchIndex``), boosted (``LEAD_BOOST``) so that its id or name finds it before the pages
that mention it (``lead_entries``), in a full build and a dirty one alike.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from types import SimpleNamespace

import jinja2
from mkdocs.plugins import BasePlugin

MANIFEST = ".dumpscope-site.json"  # in the site: the key and each page's Markdown hash (swapped in with it)
SEARCH_INDEX = "search/search_index.json"
DIRTY_WARNING = "A 'dirty' build is being performed"  # mkdocs.commands.build's warning, filtered
INDEX_LEAD = "index_lead"  # front matter: the search indexes the page's lead only (lead_entries)
LEAD_BOOST = 4  # a lead's search boost: found by its id or name before the pages that mention it
_DISTRIBUTIONS = ("dumpscope", "mkdocs", "mkdocs-material", "markdown", "pymdown-extensions", "jinja2")


@dataclass
class BuildOutcome:
    full: bool  # no usable previous site: every page built
    pages_built: int = 0  # pages mkdocs rendered (the rest carried over)
    pages_carried: int = 0
    files_carried: int = 0  # static files (assets, theme) carried over
    reason: str = ""  # why the build was full


class CompiledTemplates(jinja2.BytecodeCache):
    """Compiled Jinja templates, kept across builds: mkdocs makes a new Jinja environment at
    every build and compiled the theme's templates again (~0.7 s of a build), as did the
    site's own environment. Kept in this process (``watch``, a test run, build many sites)
    and as files in ``directory`` (the site project's, so the next night's process finds
    them). Jinja uses an entry only when its template's source checksum matches."""

    _in_process: dict[str, bytes] = {}

    def __init__(self, directory: Path):
        Path(directory).mkdir(parents=True, exist_ok=True)
        self._files = jinja2.FileSystemBytecodeCache(str(directory))

    def load_bytecode(self, bucket: jinja2.bccache.Bucket) -> None:
        kept = self._in_process.get(bucket.key)
        if kept is not None:
            bucket.bytecode_from_string(kept)
        if bucket.code is None:
            self._files.load_bytecode(bucket)

    def dump_bytecode(self, bucket: jinja2.bccache.Bucket) -> None:
        self._in_process[bucket.key] = bucket.bytecode_to_string()
        self._files.dump_bytecode(bucket)


def template_cache(config_file: Path) -> CompiledTemplates:
    """The compiled templates of the site project ``config_file`` names (its ``templates-cache/``)."""
    return CompiledTemplates(Path(config_file).parent / "templates-cache")


def build_key(config_file: Path, inputs: list[Path]) -> str:
    """A hash of what every page's HTML depends on besides its own Markdown: the rendered
    mkdocs.yml (nav, theme, plugins), the files ``inputs`` (templates, theme overrides,
    hooks, this module) and the versions of the packages that turn Markdown into HTML."""
    h = hashlib.sha256()
    for name in _DISTRIBUTIONS:
        try:
            h.update(f"{name}={metadata.version(name)}\n".encode())
        except metadata.PackageNotFoundError:
            h.update(f"{name}=none\n".encode())
    h.update(Path(config_file).read_bytes())
    for root in inputs:
        for path in sorted(p for p in ([root] if root.is_file() else root.rglob("*")) if p.is_file()):
            h.update(f"\n{path.relative_to(root.parent)}\n".encode())
            h.update(path.read_bytes())
    return h.hexdigest()


@dataclass
class _Previous:
    pages: dict[str, str]  # src_uri -> Markdown sha256
    search: dict[str, list]  # page URL -> its entries of the search index


def _previous(out: Path, key: str) -> tuple[_Previous | None, str]:
    """What the published site was built from, if it was built with ``key``, else (None, why)."""
    if not out.is_dir():
        return None, "no previous site"
    try:
        manifest = json.loads((out / MANIFEST).read_text(encoding="utf-8"))
        pages = manifest["pages"]
        if not (isinstance(pages, dict) and all(isinstance(k, str) and isinstance(v, str) for k, v in pages.items())):
            raise ValueError("pages is not a map of strings")
    except (OSError, ValueError, KeyError, TypeError) as e:
        return None, f"no usable manifest ({type(e).__name__})"
    if manifest.get("key") != key:
        return None, "templates, theme or settings changed"
    try:
        search = _by_page(json.loads((out / SEARCH_INDEX).read_text(encoding="utf-8")))
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as e:
        return None, f"no usable search index ({type(e).__name__})"
    return _Previous(pages, search), ""


def _by_page(index: dict) -> dict[str, list]:
    """The entries of a search index by the URL of their page."""
    groups: dict[str, list] = {}
    for entry in index["docs"]:
        groups.setdefault(entry["location"].split("#", 1)[0], []).append(entry)
    return groups


def lead_entries(page) -> list[dict]:
    """The search index's entry of a page that says ``index_lead``: its title and what it says
    before its first section (``<h2``), as the search plugin makes an entry (its ``SearchIndex``;
    an element marked ``data-search-exclude`` left out), boosted by ``LEAD_BOOST``. Parsing the
    lead alone, not a page of tables, keeps a thousand series pages from costing the build."""
    from material.plugins.search.plugin import SearchIndex

    content = page.content or ""
    cut = content.find("<h2")
    lead = SimpleNamespace(meta={"search": {"boost": LEAD_BOOST}}, content=content if cut < 0 else content[:cut],
                           toc=page.toc, url=page.url, title=page.title)
    index = SearchIndex()
    index.add_entry_from_context(lead)
    return index.entries[:1]  # the lead is one section


def _sha256(path: Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


class _DirtyWarningFilter(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return not record.getMessage().startswith(DIRTY_WARNING)


class _Carry(BasePlugin):
    """Links what did not change from the published site (``on_files``), counts the pages
    built, completes the search index, checks no linked file was written and writes the
    manifest (``on_post_build``)."""

    def __init__(self, key: str, previous: Path | None, built_from: _Previous | None, templates: CompiledTemplates):
        super().__init__()
        self.key = key
        self.templates = templates
        self.previous = previous  # the published site, when its pages can be carried over
        self.built_from = built_from
        self.pages = built_from.pages if built_from else {}  # src_uri -> Markdown sha256, of the published site
        self.hashes: dict[str, str] = {}  # src_uri -> Markdown sha256, of this build
        self.doc_urls: list[str] = []  # every page's URL, in the site's order
        self.carried_pages: set[str] = set()  # URLs
        self.linked: dict[Path, os.stat_result] = {}
        self.leads: dict[str, list] = {}  # URL -> its search entry, of each page built that says index_lead
        self.built = 0

    def on_env(self, env, *, config, files):
        env.bytecode_cache = self.templates
        return env

    def on_files(self, files, *, config):
        docs_dir = Path(config.docs_dir).resolve()
        for file in files:
            if file.abs_src_path is None:
                continue
            src = Path(file.abs_src_path)
            if file.is_documentation_page():
                self.hashes[file.src_uri] = digest = _sha256(src)
                self.doc_urls.append(file.url)
            if self.previous is None:
                continue
            old = self.previous / file.dest_uri
            if not old.is_file():
                continue
            if file.is_documentation_page():
                same = self.pages.get(file.src_uri) == digest
            else:
                same = old.stat().st_size == src.stat().st_size and old.read_bytes() == src.read_bytes()
            ours = src.resolve().is_relative_to(docs_dir)
            if not same or (not ours and src.stat().st_mtime_ns > old.stat().st_mtime_ns):
                continue  # built or copied anew (a file in site-packages is never touched)
            new = Path(file.abs_dest_path)
            new.parent.mkdir(parents=True, exist_ok=True)
            try:
                os.link(old, new)
            except OSError:  # a file system without hard links: a copy, with its mtime, is as good
                shutil.copy2(old, new)
            self.linked[new] = new.stat()
            if ours:  # File.is_modified: dest older than src -> build. Equal: skip.
                os.utime(src, ns=(src.stat().st_atime_ns, self.linked[new].st_mtime_ns))
            if file.is_documentation_page():
                self.carried_pages.add(file.url)
        return files

    def on_page_context(self, context, *, page, config, nav):
        if page.meta.get(INDEX_LEAD):
            self.leads[page.url] = lead_entries(page)
        return context

    def on_post_page(self, output, *, page, config):
        self.built += 1
        return output

    def on_post_build(self, *, config):
        for path, before in self.linked.items():
            now = path.stat()
            if (now.st_ino, now.st_mtime_ns, now.st_size) != (before.st_ino, before.st_mtime_ns, before.st_size):
                raise RuntimeError(f"{path}: a file carried over from the published site was written in place")
        if self.carried_pages or self.leads:
            self._merge_search_index(Path(config.site_dir) / SEARCH_INDEX)
        (Path(config.site_dir) / MANIFEST).write_text(json.dumps({"key": self.key, "pages": self.hashes}, sort_keys=True),
                                                      encoding="utf-8")

    def _merge_search_index(self, path: Path) -> None:
        """The built pages' entries (the search plugin's, and the leads), and the carried pages'
        from the published index, page by page in the order of the site's pages (a full build's order)."""
        new = json.loads(path.read_text(encoding="utf-8"))
        built, old = _by_page(new) | self.leads, self.built_from.search if self.built_from else {}
        new["docs"] = [entry for url in self.doc_urls
                       for entry in (old if url in self.carried_pages else built).get(url, [])]
        path.write_text(json.dumps(new, separators=(",", ":"), default=str), encoding="utf-8")


def build(config_file: Path, out: Path, key_inputs: list[Path]) -> BuildOutcome:
    """Build the mkdocs project ``config_file`` into ``out`` (replaced atomically), carrying
    over from the published ``out`` what did not change (the module's docstring)."""
    from mkdocs.commands.build import build as mkdocs_build
    from mkdocs.config import load_config

    log = logging.getLogger("mkdocs")
    log.setLevel(logging.WARNING)
    if not log.handlers:  # strict mode aborts on a warning: say which
        handler = logging.StreamHandler()
        handler.setFormatter(logging.Formatter("mkdocs %(levelname)s: %(message)s"))
        log.addHandler(handler)
    key = build_key(config_file, key_inputs)
    built_from, reason = _previous(out, key)
    staging = out.with_name(out.name + ".next")
    shutil.rmtree(staging, ignore_errors=True)
    cfg = load_config(str(config_file), site_dir=str(staging), strict=True)
    carry = _Carry(key, out if built_from else None, built_from, template_cache(config_file))
    cfg.plugins["dumpscope-carry"] = carry  # after the search plugin: its index is written first
    dirty = built_from is not None
    build_log = logging.getLogger("mkdocs.commands.build")
    warning_filter = _DirtyWarningFilter()
    build_log.addFilter(warning_filter)
    try:
        mkdocs_build(cfg, dirty=dirty)
    finally:
        build_log.removeFilter(warning_filter)
    old = out.with_name(out.name + ".old")
    shutil.rmtree(old, ignore_errors=True)
    if out.exists():
        out.rename(old)
    staging.rename(out)
    shutil.rmtree(old, ignore_errors=True)
    return BuildOutcome(full=not dirty, pages_built=carry.built, pages_carried=len(carry.carried_pages),
                        files_carried=len(carry.linked) - len(carry.carried_pages), reason=reason)
