"""The order a publish uploads a site to an object store (``flows.publish.release``), so that,
wherever the upload stops, no page a reader can reach links to an object that is not there.

``site_links(files)``: each file of the site -> the files of the site it links to.
``upload_order(links, trusted)``: the files in the order to upload them, component by component.

**The links** are read from the files themselves, not from where they sit: the site's pages
link to each other at every depth (an incident page to its run page and back), and some links
are data, not ``href``: a chart's points link to their run in the chart file
(``<page>.charts.js``), every page's status line to the latest run (``assets/status-data.js``),
the search to every page (``search/search_index.json``). So every text file is scanned
(``TEXT_SUFFIXES``) and any word of it that names a file of the site, from the file's own
directory or from the site's root, counts as a link (scheme, host, query and fragment aside).
This finds more links than a browser follows (a comment naming a page); an extra link can only
make the order wait for more, never less.

**The order**, and why it holds. Objects already at DEST (same relative path) stay until every
upload is done. Those ``trusted`` are whole: each links only to objects at DEST (a finished
publish leaves all of them so; ``release`` lists, in ``PUBLISHING``, the ones a publish killed
midway may leave otherwise, which are not trusted). Call an object *new* when it is not a
trusted one. The links make a graph, with cycles (a run page and its incident pages link to each
other; every page and the status line's data, which links to the latest run); its strongly
connected components form a graph without cycles, and the components are uploaded leaves first:
a component after every component it links to. Within a component, the new objects go first,
then the trusted ones, the front page (``index.html``) last. Then at every moment:

- an object of an earlier component, or a trusted object not uploaded yet (its old version),
  has every link present;
- an uploaded object of the component in progress, once its new objects are all up, too (its
  links stay in its component or go to earlier ones);
- so only the new objects of the component in progress may lack a link, and only while its
  new objects go up. None of them is reachable then: a trusted object never links to a new one
  (what ``PUBLISHING`` lists is linked only from what it lists), an earlier component never links
  to a later one, and the front page, where a reader comes in, is the last of its component.

A reader who follows links from the front page therefore never meets a link to a missing
object, after any number of uploads; a bookmark straight to a new page may arrive before the
pages it links to, as it may arrive before the page itself. Readers may see two nights' pages
for the seconds of the upload.
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Mapping
from pathlib import Path
from typing import NamedTuple
from urllib.parse import unquote

import networkx as nx

FRONT_PAGE = "index.html"
TEXT_SUFFIXES = frozenset({".html", ".js", ".json", ".css", ".xml", ".svg", ".txt"})  # others hold no links
_ESCAPE = re.compile(r"\\(?:u[0-9a-fA-F]{4}|.)", re.DOTALL)  # JSON and JS escapes: \n between CSV rows
_SEPARATORS = frozenset(" \t\r\n\"'`<>()[]{},;=|\\")  # what ends a word that may be a link
_SCHEME = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*:|//")  # external (http:, //host), data:, mailto:, javascript:


def site_links(files: Mapping[str, Path]) -> dict[str, set[str]]:
    """``files``: each file of the site, by its path from the site's root (``runs/2026-11-20.html``)
    -> where its bytes are. Returns each of them -> the files of the site it links to (not itself)."""
    names = {rel.rsplit("/", 1)[-1] for rel in files}
    suffixes = sorted({posixpath.splitext(n)[1][1:] for n in names} - {""})
    # Where a word naming a file of the site may end: its suffix, then the end of the word, a query or a fragment.
    ends = re.compile(r"\.(?:" + "|".join(map(re.escape, suffixes)) + r")(?![\w.-])") if suffixes else None
    links = {}
    for rel, path in files.items():
        links[rel] = set()
        if ends is None or path.suffix not in TEXT_SUFFIXES:
            continue
        text = path.read_text(encoding="utf-8", errors="replace").replace("\\/", "/")
        if "\\" in text:
            text = _ESCAPE.sub(" ", text)
        for end in ends.finditer(text):
            start = end.start()
            while start and text[start - 1] not in _SEPARATORS:
                start -= 1
            word = unquote(text[start:end.end()])
            if word.rsplit("/", 1)[-1] in names and not _SCHEME.match(word):
                links[rel] |= _named(rel, word, files)
    return links


def _named(rel: str, word: str, files: Mapping[str, Path]) -> set[str]:
    """The files of the site ``word`` names, from ``rel``'s directory or from the site's root."""
    here = posixpath.normpath(posixpath.join(posixpath.dirname(rel), word))
    from_root = posixpath.normpath(word.lstrip("/"))
    return {target for target in (here, from_root) if target in files and target != rel}


class Component(NamedTuple):
    """One strongly connected component of the site's links, in the order to upload it."""

    fresh: list[str]  # not at DEST (or not known whole there): they may link to each other until all are up
    others: list[str]  # already at DEST, then the front page


def upload_order(links: Mapping[str, set[str]], trusted: set[str]) -> list[Component]:
    """Every file of ``links`` (``site_links``'s result), by strongly connected component, leaves
    first; within one, the files not in ``trusted`` (at DEST and whole there) first, the front
    page last."""
    graph = nx.DiGraph()
    graph.add_nodes_from(links)
    graph.add_edges_from((source, target) for source, targets in links.items() for target in targets)
    components = nx.condensation(graph)  # one node per component, an edge where a member links to another's
    members = nx.get_node_attributes(components, "members")
    leaves_first = nx.lexicographical_topological_sort(components.reverse(copy=False), key=lambda c: min(members[c]))
    order = []
    for component in leaves_first:
        files = sorted(members[component])
        fresh = [rel for rel in files if rel not in trusted and rel != FRONT_PAGE]
        order.append(Component(fresh, sorted(set(files) - set(fresh), key=lambda rel: (rel == FRONT_PAGE, rel))))
    return order
