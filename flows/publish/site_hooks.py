"""mkdocs hooks of the report site (``hooks:`` in the mkdocs.yml that ``flows.publish.site`` writes).

Raw HTML that Markdown need not read: a template marks a table it formats as HTML (one
without links or anchors, its cells escaped like every value) with a ``<!--ds-raw-->``
line before it and a ``<!--/ds-raw-->`` line after it. ``on_page_markdown`` takes each such
block out before Markdown reads the page, leaving a comment in its place, and
``on_page_content`` puts it back into the HTML Markdown made. Python-Markdown parses raw
HTML tag by tag (twice, with mkdocs' anchor scan): the tables of a thousand series pages
were most of a build. Links and anchors stay in Markdown, where ``--strict`` checks them.

Nothing here may depend on the night: a page whose Markdown did not change keeps the HTML
of the night it was built (``flows.publish.site_mkdocs``). The status line, which changes
every night, is ``assets/status-data.js``, not part of any page's HTML.
"""

from __future__ import annotations

import re

_BLOCK = re.compile(r"^<!--ds-raw-->\n(.*?)^<!--/ds-raw-->$", re.S | re.M)
_stash: dict[str, list[str]] = {}


def on_page_markdown(markdown: str, page, **_) -> str:
    blocks: list[str] = []

    def keep(match: re.Match[str]) -> str:
        blocks.append(match.group(1))
        return f"<!--ds-raw-{len(blocks) - 1}-->"

    text = _BLOCK.sub(keep, markdown)
    _stash[page.file.src_uri] = blocks
    return text


def on_page_content(html: str, page, **_) -> str:
    for i, block in enumerate(_stash.pop(page.file.src_uri, [])):
        mark = f"<!--ds-raw-{i}-->"
        if mark not in html:
            raise ValueError(f"{page.file.src_uri}: raw block {i} lost its place")
        html = html.replace(mark, block, 1)
    return html
