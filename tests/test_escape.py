"""transforms/escape.py: each context, checked by rendering the result as the site does
(Python-Markdown with the site's extensions, an HTML parser, DuckDB, shlex)."""

from __future__ import annotations

import html
import json
import re
import shlex
from html.parser import HTMLParser
from urllib.parse import unquote

import markdown
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from transforms.escape import (Markup, block_text, code, finalize, html_attr, json_script, md_text, pre, shell_word,
                               slug, sql_literal, url_path)

PAYLOADS = [
    "<img src=x onerror=alert(13)>", "<script>alert(1)</script>", "javascript:alert(1)", "{%x%}", "{{7*7}}",
    "'; DROP TABLE dumps; --", "a|b", "[x](javascript:alert(1))", '{: onclick="alert(1)"}', "<built-in function getitem>",
    "__init__ *a* _b_ `c` \\d ~~e~~ #f &amp; &#60;", "- item", "1. first", "# heading", "!!! note", '??? failure "x"',
    "    indented", "line\nbreak\r\nand\u2028more", "a\x00b\x02wzxhzdk:0\x03c\x7f", "lone \ud800 surrogate",
    "\u202egnp.exe", "＜img＞", "../../etc/passwd", "x" * 300, "![i](x.png)", "<http://example.com>", "[TOC]",
    "a  \nb", "foo {: #id .cls }", "-->", "<!--", "\\|",
]
# Markdown's inline syntax, and the characters that would end an HTML text or attribute.
_ACTIVE = set("<>\"'`*[]{}|\\#~\n\r")
# Any text, including line breaks, controls and lone surrogates.
TEXT = st.text(st.characters(codec=None, exclude_categories=()), max_size=40)


def _md(source: str) -> str:
    return markdown.markdown(source, extensions=["tables", "attr_list", "md_in_html", "admonition", "pymdownx.details",
                                                 "pymdownx.superfences", "toc"])


def shown(value: object) -> str:
    """What the reader should see for ``value`` on one line."""
    text = "" if value is None else re.sub(r"[\ud800-\udfff]", "\ufffd", str(value))
    text = re.sub(r"[\t\n\r\v\f\x1c-\x1e\x85\u2028\u2029]", " ", text)
    text = re.sub(r"[\x00-\x1f]", lambda m: chr(0x2400 + ord(m.group())), text)
    return re.sub(r"[\x80-\x9f]", "\ufffd", text.replace("\x7f", "\u2421"))


class _Tree(HTMLParser):
    """Tags and text of an HTML fragment (character references decoded)."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.tags: list[tuple[str, dict]] = []
        self.text: list[str] = []

    def handle_starttag(self, tag, attrs):
        self.tags.append((tag, dict(attrs)))

    def handle_data(self, data):
        self.text.append(data)


def tree(fragment: str) -> _Tree:
    parser = _Tree()
    parser.feed(fragment)
    parser.close()
    return parser


def _is_inert(escaped: str) -> None:
    escaped = str(escaped)
    bare = re.sub(r"&#\d+;", "\x00", escaped)  # what is left outside numeric character references
    assert not _ACTIVE & set(bare) and "&" not in bare, escaped
    assert not re.search(r"(?<![A-Za-z0-9])_|_(?![A-Za-z0-9])", bare), escaped
    assert not re.match(r"[-+=!? ]|\d+\.(\s|$)", escaped), escaped


@pytest.mark.parametrize("value", PAYLOADS)
def test_md_text_leaves_nothing_markdown_or_html_would_read(value):
    escaped = md_text(value)
    _is_inert(escaped)
    assert html.unescape(escaped) == shown(value)


@settings(max_examples=300, deadline=None)
@given(TEXT)
def test_md_text_of_any_text_is_inert_and_reads_back(value):
    escaped = md_text(value)
    _is_inert(escaped)
    assert html.unescape(escaped) == shown(value)


def _cells(rendered: str) -> list[str]:
    return re.findall(r"<td>(.*?)</td>", rendered, re.S)


@settings(max_examples=150, deadline=None)
@given(TEXT, TEXT)
def test_a_value_never_leaves_its_table_cell(left, right):
    rendered = _md(f"| a | b |\n| --- | --- |\n| {md_text(left)} | {md_text(right)} |\n")
    cells = _cells(rendered)
    assert len(cells) == 2, rendered
    assert [t for t, _ in tree(rendered).tags] == ["table", "thead", "tr", "th", "th", "tbody", "tr", "td", "td"]
    assert [html.unescape(c).strip() for c in cells] == [shown(left).strip(), shown(right).strip()]


@pytest.mark.parametrize("value", PAYLOADS)
def test_in_every_markdown_place_a_payload_is_only_text(value):
    v = md_text(value)
    page = (f"# {v}\n\n## {v} {{ #anchor }}\n\nSome {v} text, **{v}**, and [{v}](target.md).\n\n- {v}\n- x {v}\n\n"
            f"{v}\n\n| {v} |\n| --- |\n| {v} |\n\n!!! note \"{v}\"\n\n    {v}\n\n??? failure \"{v}\"\n\n    {v}\n")
    parsed = tree(_md(page))
    assert {t for t, _ in parsed.tags} <= {"h1", "h2", "p", "strong", "a", "ul", "li", "table", "thead", "tbody", "tr",
                                            "th", "td", "div", "details", "summary"}, parsed.tags
    assert [a["href"] for t, a in parsed.tags if t == "a"] == ["target.md"]
    assert [a["id"] for t, a in parsed.tags if t == "h2"] == ["anchor"]
    assert all(set(a) <= {"id", "class", "href"} for _, a in parsed.tags), parsed.tags
    assert {a.get("class") for t, a in parsed.tags if t in ("div", "details")} <= {"admonition note", "failure"}
    if shown(value).strip():
        assert "".join(parsed.text).count(shown(value).strip()) >= 8


@settings(max_examples=150, deadline=None)
@given(TEXT)
@example("\r \n")  # a line of a space alone (found by hypothesis in a full run)
@example(" ")  # spaces on the line of <code>, not alone (found by hypothesis in a full run)
@example(" \n ")
def test_block_text_in_a_pre_block_keeps_its_lines(value):
    rendered = _md(f"before\n\n{pre(value, 'text')}\n\nafter *x*\n")
    parsed = tree(rendered)
    assert [t for t, _ in parsed.tags] == ["p", "pre", "code", "p", "em"], rendered
    body = re.search(r"<code class=\"language-text\">(.*)</code></pre>", rendered, re.S).group(1)
    lines = re.sub(r"[\ud800-\udfff]", "\ufffd", value).replace("\r\n", "\n").replace("\r", "\n")
    # Markdown empties a line of spaces alone before it reads blocks: it shows as the empty line it looks like.
    # The first and last lines share their line of the page with <code> and </code>: they are not alone.
    parts = lines.split("\n")
    lines = "\n".join("" if 0 < i < len(parts) - 1 and line.strip(" ") == "" else line for i, line in enumerate(parts))
    expected = shown(lines.replace("\n", "\x00NL").replace("\t", "\x00TAB")).replace("␀NL", "\n").replace("␀TAB", "\t")
    assert html.unescape(body) == expected
    assert "<" not in block_text(value) and ">" not in block_text(value)


@settings(max_examples=200, deadline=None)
@given(TEXT)
def test_html_attr_stays_in_its_attribute(value):
    parsed = tree(f'<div title="{html_attr(value)}" class="k"></div>')
    assert parsed.tags == [("div", {"title": shown(value), "class": "k"})]


def test_code_is_inline_code_showing_the_value():
    parsed = tree(_md(f"x {code('<built-in function getitem> `a` *b*')} y"))
    assert [t for t, _ in parsed.tags] == ["p", "code"]
    assert "".join(parsed.text) == "x <built-in function getitem> `a` *b* y"


def test_pre_takes_only_a_language_name():
    assert pre("a", "sql").startswith('<pre><code class="language-sql">')
    with pytest.raises(ValueError):
        pre("a", 'x" onclick="alert(1)')


@pytest.mark.parametrize("name", ["2026-11-19", "jax-jit", "a", "x0-9"])
def test_a_name_that_is_a_slug_keeps_it(name):
    assert slug(name) == name


@pytest.mark.parametrize("name", PAYLOADS + ["index", "Index", "jit__fun", "a.b", "-a", "a-", "",
                                             "jax-jit-0123456789abcdef", "a" * 81])
def test_slugs_are_inert_and_bounded(name):
    s = slug(name)
    assert re.fullmatch(r"[a-z0-9](?:[a-z0-9-]*[a-z0-9])?", s) and len(s) <= 80, s
    assert s != "index"
    assert md_text(s) == s  # nothing to escape: safe in a URL, an id, an attr_list and Markdown text


@settings(max_examples=300, deadline=None)
@given(TEXT, TEXT)
def test_different_names_never_share_a_slug(a, b):
    if a != b:
        assert slug(a) != slug(b)
        assert slug(a, b) != slug(b, a)
    assert slug(a + "/", b) != slug(a, "/" + b)


def test_names_that_differ_only_in_undecodable_bytes_get_their_own_slugs():
    assert slug("job-\udcff") != slug("job-\udcfe")


def test_a_clean_name_cannot_take_a_hashed_names_slug():
    hashed = slug("a b")
    assert slug(hashed) != hashed


@settings(max_examples=150, deadline=None)
@given(st.lists(TEXT, min_size=1, max_size=4), st.one_of(st.none(), TEXT))
def test_url_path_segments_round_trip(segments, fragment):
    url = url_path(*segments, fragment=fragment)
    assert re.fullmatch(r"[A-Za-z0-9._~%/-]*(#[A-Za-z0-9._~%-]*)?", url), url
    path, _, frag = url.partition("#")
    assert [unquote(s, errors="surrogatepass") for s in path.split("/")] == [
        re.sub(r"[\ud800-\udfff]", "\ufffd", s) for s in segments]
    if fragment:
        assert unquote(frag) == re.sub(r"[\ud800-\udfff]", "\ufffd", fragment)


@settings(max_examples=150, deadline=None)
@given(st.recursive(st.none() | st.booleans() | st.integers() | st.text(),
                    lambda kids: st.lists(kids, max_size=3) | st.dictionaries(st.text(), kids, max_size=3), max_leaves=10))
def test_json_script_cannot_end_its_script_element(value):
    text = json_script(value)
    assert not set("<>&") & set(text)
    assert json.loads(text) == value


@pytest.mark.parametrize("value", PAYLOADS)
def test_sql_literal_is_one_string(value):
    import duckdb

    value = value.replace("\x00", "").encode("utf-8", "replace").decode()
    assert duckdb.sql(f"SELECT {sql_literal(value)} AS v").fetchall() == [(value,)]


@pytest.mark.parametrize("value", PAYLOADS)
def test_shell_word_is_one_word(value):
    assert shlex.split(shell_word(value)) == [re.sub(r"[\ud800-\udfff]", "\ufffd", value)]


def test_finalize_lets_markup_through_and_escapes_the_rest():
    made = code("<x>")
    assert finalize(made) is made
    assert finalize("<x>") == "&#60;x&#62;" and isinstance(finalize("<x>"), Markup)
    assert finalize(None) == "" and finalize(3) == "3"
    assert md_text(Markup("<b>")) == "&#60;b&#62;"  # an explicit call escapes whatever it gets


@pytest.mark.parametrize("commit", PAYLOADS)
def test_a_commit_from_run_json_stays_inside_its_report_links(commit):
    """run.json's commit lands in link destinations of the night report (and its notifications):
    percent-encoded there, shown as inline code, never a link or markup of its own."""
    from transforms.trends.night_report import commit_range

    row = {"last_good_commit": commit, "first_bad_commit": "9b03c5e"}
    parsed = tree(_md(commit_range(row, "https://git.example/c/{commit}", "https://git.example/compare/{base}...{head}")))
    assert {t for t, _ in parsed.tags} <= {"p", "a", "code"}, parsed.tags
    hrefs = [a["href"] for t, a in parsed.tags if t == "a"]
    assert len(hrefs) == 3 and all(h.startswith("https://git.example/") for h in hrefs)
    kept = re.sub(r"[\ud800-\udfff]", "\ufffd", commit)  # a lone surrogate cannot be encoded
    assert unquote(hrefs[0].removeprefix("https://git.example/c/")) == kept
    assert unquote(hrefs[2].removeprefix("https://git.example/compare/")) == f"{kept}...9b03c5e"
