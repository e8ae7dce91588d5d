"""Escaping for the report site: every value from a dump, a bucket path or run.json is data.

Names come from people and compilers (job directories, run ids, file names, HLO module
names, op_name metadata, ONNX operator names, run.json fields) and may hold any text:
``<img src=x onerror=alert(1)>``, ``[x](javascript:...)``, ``{: onclick=...}``,
``{{7*7}}``, newlines, control characters. A value reaches a page only through one of
these functions, chosen by where it lands; each returns text that is inert there.
Pure: the standard library and markupsafe only.

The pages are Markdown (rendered by mkdocs with tables, attr_list, md_in_html,
admonition, details, superfences and toc) with raw HTML blocks in them, so HTML
escaping alone is not enough: Markdown would still make links, emphasis, attribute
lists and table columns out of ``[ ] ( ) * _ { } |``.

=================================  ===============================================
Context                            Function
=================================  ===============================================
Markdown inline text: paragraphs,  ``md_text`` (the default: the site's Jinja
list items, headings, link text,   ``finalize`` applies it to every ``{{ value }}``
table cells, admonition titles;    that is not already ``Markup``). Characters that
also HTML text and a quoted HTML   HTML or Markdown read (``& < > " ' \\ ` * [ ] { }
attribute value                    | # ~``, ``_`` unless between two letters or
                                   digits) become numeric character references,
                                   which Markdown passes through and the browser
                                   shows as the character; line breaks become
                                   spaces (a value never starts a block or leaves
                                   its table cell); a leading ``- + = ! ?``, space
                                   or ``1.`` cannot start a list, heading rule,
                                   admonition or code block.
Inline code                        ``code``: ``<code>`` around ``md_text`` (a
                                   Markdown code span would show the references
                                   literally, and a backtick in the value would
                                   end it).
Multi-line text in a raw HTML      ``block_text`` (``md_text`` keeping line breaks)
block (``<pre>``)                  and ``pre`` (the whole ``<pre><code>`` block).
Quoted HTML attribute written by   ``html_attr``: the same as ``md_text``.
Python (a chart's aria-label)
File names, heading anchors        ``slug``: ``[a-z0-9-]`` only (inert in a URL, an
                                   HTML id, an attr_list ``{ #id }`` and Markdown
                                   text), never ``index``; a name that is not
                                   already such a slug gets a readable prefix and
                                   16 hex digits of its sha256, so two names never
                                   share a page or an anchor.
Link destinations (Markdown        ``url_path``: each path segment percent-encoded.
``(...)`` or ``href``)
JSON in ``<script type=            ``json_script``: ``< > &`` and U+2028/2029 as
"application/json">``              ``\\uXXXX``, so no ``</script>`` or ``<!--`` can
                                   end or bend the block.
Copy-paste snippets                ``sql_literal`` (a SQL string literal) and
                                   ``shell_word`` (one POSIX shell word); plain
                                   strings that still go through ``code``/``pre``.
A notification's text (a chat      ``chat_text(value, service)``: ``plain_text``
message, a webhook's plain text)   with every mention inert (``CHAT_MENTIONS``);
                                   for Discord and Mattermost, which read a text
                                   message as Markdown, ASCII punctuation
                                   backslash-escaped too.
A notification's HTML (Apprise     ``chat_code(value, service)``: ``code`` of the
converts it for the target)        value with its mentions inert.
A notification's title (plain to   ``chat_title``: the value when it is a plain
some, Markdown to others)          name (letters, digits, ``. _ : + -``), else None.
=================================  ===============================================

``Markup`` marks text one of these functions made (or HTML the site's own code
built from such pieces): the Jinja ``finalize`` hook lets it through and escapes
everything else. Fenced code blocks cannot escape anything, so data never goes in
one: use ``code`` or ``pre``. Lone surrogates (undecodable bytes in a path) become
U+FFFD; other control characters become their visible Control Pictures (U+2400...).
"""

from __future__ import annotations

import hashlib
import json
import re
import shlex
import unicodedata
from functools import lru_cache
from urllib.parse import quote

from markupsafe import Markup

__all__ = ["CHAT_MENTIONS", "Markup", "block_text", "breakable", "breakable_code", "chat_code", "chat_text", "chat_title",
           "code", "finalize",
           "html_attr", "json_script", "md_text", "plain_text", "pre", "shell_word", "slug", "sql_literal", "url_path"]

_REF = {c: f"&#{ord(c)};" for c in "&<>\"'\\`*[]{}|#~"}
_SPACE = " "
_CONTROLS = {i: chr(0x2400 + i) for i in range(0x20)} | {0x7F: "\u2421"} | {i: "\ufffd" for i in range(0x80, 0xA0)}
# Line and paragraph separators, and what str.splitlines() splits on, are line breaks.
_BREAKS = {ord(c): _SPACE for c in "\t\n\r\v\f\x1c\x1d\x1e\x85\u2028\u2029"}
_INLINE = str.maketrans({**_CONTROLS, **_BREAKS, **_REF})
_PLAIN = str.maketrans({**_CONTROLS, **_BREAKS})
_BLOCK = str.maketrans({**_CONTROLS, **_BREAKS, ord("\t"): "&#9;", ord("\n"): "\n", **_REF})  # Markdown would expand a tab
_SURROGATE = re.compile(r"[\ud800-\udfff]")
_UNDERSCORE = re.compile(r"(?<![A-Za-z0-9])_|_(?![A-Za-z0-9])")  # may open or close emphasis
_LEADING = re.compile(r"^(?:[-+=!? ]|\d+\.(?=\s|$))")  # a list, rule, admonition, details or code block
_LANG = re.compile(r"[a-z0-9]+")

_SLUG = re.compile(r"[a-z0-9](?:[a-z0-9-]{0,78}[a-z0-9])?")
_HASHED = re.compile(r"-[0-9a-f]{16}$")
_RESERVED = frozenset({"index"})  # runs/index.md and series/index.md are the listings


def _text(value: object) -> str:
    return _SURROGATE.sub("\ufffd", "" if value is None else str(value))


def _leading(match: re.Match[str]) -> str:
    s = match.group()
    return s[:-1] + "&#46;" if s.endswith(".") else f"&#{ord(s)};"


def md_text(value: object) -> Markup:
    """``value`` as Markdown inline text (a table cell, a heading, link text...); None is empty.

    The result holds no ``< > & " '`` except in character references, no character
    Markdown reads as syntax, no line break and no control character.
    """
    return _md_text(_text(value))


@lru_cache(maxsize=1 << 16)  # the site escapes the same names on many pages (~500 k calls at a year)
def _md_text(text: str) -> Markup:
    # References only replace characters that are not letters or digits, so the underscore
    # rule sees the same neighbours after the translation as before it.
    text = _UNDERSCORE.sub("&#95;", text.translate(_INLINE))
    return Markup(_LEADING.sub(_leading, text))


def plain_text(value: object) -> str:
    """``value`` as one line of plain text (a text-only notification): no line break, control
    characters shown as symbols, nothing else changed (no markup reads it)."""
    return _text(value).translate(_PLAIN)


def block_text(value: object) -> Markup:
    """Like ``md_text`` but keeping line breaks (``\\r\\n`` and ``\\r`` become ``\\n``) and tabs:
    for the content of a raw HTML block such as ``<pre>``. The result holds no ``<``, ``>``
    or fence character, so the block cannot end early or open a fenced block inside it."""
    text = _text(value).replace("\r\n", "\n").replace("\r", "\n")
    return Markup(_UNDERSCORE.sub("&#95;", text.translate(_BLOCK)))


def code(value: object) -> Markup:
    """``value`` as inline code."""
    return Markup("<code>") + md_text(value) + Markup("</code>")


def pre(value: object, lang: str = "") -> Markup:
    """``value`` as a code block: raw HTML, so it must stand alone between blank lines."""
    if lang and not _LANG.fullmatch(lang):
        raise ValueError(f"not a language name: {lang!r}")
    cls = Markup(' class="language-{}"').format(lang) if lang else Markup("")
    return Markup("<pre><code{}>{}</code></pre>").format(cls, block_text(value))


def html_attr(value: object) -> Markup:
    """``value`` as the content of a double-quoted HTML attribute: ``md_text``'s escaping, which
    a browser reads back, and which stays inert should the tag ever land in Markdown text."""
    return md_text(value)


def slug(*parts: object) -> str:
    """A file name stem or anchor for a name (or a tuple of names): ``[a-z0-9-]``, at most ~80 chars.

    One name that already is such a slug (and not ``index``, and not ending like a
    hashed one) is kept; anything else gets a readable prefix and 16 hex digits of the
    sha256 of the name(s), so different names never get the same slug.
    """
    if not parts:
        raise TypeError("slug() needs a name")
    texts = [_text(p) for p in parts]
    if len(texts) == 1 and _SLUG.fullmatch(texts[0]) and not _HASHED.search(texts[0]) and texts[0] not in _RESERVED:
        return texts[0]
    flat = unicodedata.normalize("NFKD", "-".join(texts)).encode("ascii", "ignore").decode().lower()
    readable = re.sub(r"[^a-z0-9]+", "-", flat).strip("-")[:60].strip("-") or "x"
    raw = ["" if p is None else str(p) for p in parts]  # undecodable bytes (lone surrogates) count too
    identity = (raw[0] if len(raw) == 1 else json.dumps(raw)).encode("utf-8", "surrogatepass")
    return f"{readable}-{hashlib.sha256(identity).hexdigest()[:16]}"


def url_path(*segments: object, fragment: str | None = None) -> Markup:
    """A relative URL from path segments (``".."`` goes up), each percent-encoded."""
    path = "/".join(quote(_text(s), safe="") for s in segments)
    return Markup(path + (f"#{quote(_text(fragment), safe='')}" if fragment else ""))


_JSON_UNSAFE = str.maketrans({"<": "\\u003c", ">": "\\u003e", "&": "\\u0026", "\u2028": "\\u2028", "\u2029": "\\u2029"})


def json_script(value: object) -> Markup:
    """``value`` as JSON for the body of a ``<script type="application/json">`` element."""
    return Markup(json.dumps(value, separators=(",", ":"), default=str).translate(_JSON_UNSAFE))


def sql_literal(value: object) -> str:
    """``value`` as a SQL string literal (for a query the reader copies)."""
    return "'" + _text(value).replace("'", "''") + "'"


def shell_word(value: object) -> str:
    """``value`` as one POSIX shell word (for a command the reader copies)."""
    return shlex.quote(_text(value))


def finalize(value: object) -> Markup:
    """The site's Jinja ``finalize``: ``Markup`` passes, anything else is ``md_text``."""
    return value if isinstance(value, Markup) else md_text(value)


# ---------------------------------------------------------------- Markdown text that may wrap

_BREAK_AFTER = re.compile(r"([./_])")


def breakable(value: object) -> Markup:
    """``md_text(value)`` that may wrap after each ``.``, ``/`` and ``_`` (``<wbr>``): a metric,
    series or path in a narrow table column wraps there instead of one letter per line. The
    characters follow the escaping: no character reference holds one, and every ``_`` left
    stands between two letters or digits, so it cannot open emphasis."""
    return _breakable(_text(value))


@lru_cache(maxsize=1 << 16)
def _breakable(text: str) -> Markup:
    return Markup(_BREAK_AFTER.sub(r"\1<wbr>", str(_md_text(text))))


def breakable_code(value: object) -> Markup:
    """``breakable`` as inline code."""
    return _breakable_code(_text(value))


@lru_cache(maxsize=1 << 16)
def _breakable_code(text: str) -> Markup:
    return Markup("<code>") + _breakable(text) + Markup("</code>")


# ---------------------------------------------------------------- notifications (chats and webhooks)

# What each kind of notification target reads as a mention: a ping of a person, a role, a channel
# or everyone. Every target gets the same rule (``_MENTION``), which breaks them all: a name inert on
# one chat is inert on every other, and a webhook's text may be forwarded to any of them.
CHAT_MENTIONS = {
    "discord": "@everyone, @here, <@id>, <@!id>, <@&role>, <#channel>; Apprise's Discord plugin, given "
               "Markdown, also turns every @word of the body into a ping (allow_mentions)",
    "slack": "<!channel>, <!here>, <!everyone>, <@U…>, <!subteam^…>; @channel and @name where link_names is on",
    "teams": "<at>name</at>: Apprise's Workflows plugin makes each a mention entity of the card, inside a code span too",
    "mattermost": "@channel, @all, @here, @name",
    "webhook": "none of its own (json://, form://, xml://): whatever it forwards the text to reads any of the above",
    "chat": "any other target: Telegram and Rocket.Chat @name, Matrix @room, Zulip @**all**, Google Chat "
            "<users/all>, Webex <@all>...",
}
# Where a mention starts: an @ (or a fullwidth one) before a non-space, or a < that opens a mention,
# a channel or a special token (<!, <@, <#, <&, <:, </, <^, <at>, <users/...>). A zero-width space
# goes after it, as discord.py's escape_mentions does: the text reads the same and parses as none.
_MENTION = re.compile(r"[@\uff20](?=\S)|<(?=[!@#&:/^]|[a-z])", re.IGNORECASE)
_ZERO_WIDTH_SPACE = "\u200b"
# Targets whose text messages the service shows as Markdown whatever Apprise sends them as.
_MARKDOWN_TEXT = frozenset({"discord", "mattermost"})
_ASCII_PUNCTUATION = re.compile(r"([!-/:-@\[-`{-~])")  # CommonMark and Discord read "\\" + any of these as it


def _inert_mentions(text: str, service: str) -> str:
    if service not in CHAT_MENTIONS:
        raise ValueError(f"not a notification service: {service!r} (one of {', '.join(CHAT_MENTIONS)})")
    return _MENTION.sub(lambda m: m.group() + _ZERO_WIDTH_SPACE, text)


def chat_text(value: object, service: str = "chat") -> str:
    """``value`` as one line of a notification's text for ``service`` (a key of ``CHAT_MENTIONS``):
    ``plain_text`` in which no mention pings, and, where the service shows a text message as
    Markdown (Discord, Mattermost), every ASCII punctuation character backslash-escaped, so no
    link, emphasis, quote or heading comes out of a name."""
    text = _inert_mentions(plain_text(value), service)
    return _ASCII_PUNCTUATION.sub(r"\\\1", text) if service in _MARKDOWN_TEXT else text


def chat_title(value: object) -> str | None:
    """``value`` for a notification's title, or None when it may not go in one. A title is plain
    text to some services and Markdown to others (a Teams card's heading, a Discord message), in
    which Apprise escapes nothing: only a name no markup and no mention reads (ASCII letters and
    digits, then ``. _ : + -``; at most 80) goes in a title, any other is named in the body only."""
    text = _text(value)
    return text if _PLAIN_NAME.fullmatch(text) else None


_PLAIN_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:+-]{0,79}")


def chat_code(value: object, service: str = "chat") -> Markup:
    """``value`` as inline code of the HTML a notification target gets (Apprise converts it into
    the service's own markup): ``code`` of the value with its mentions inert. A code span shows
    the value verbatim, but Apprise still reads mentions in it (Teams' ``<at>``, Discord's @word)."""
    return code(_inert_mentions(plain_text(value), service))
