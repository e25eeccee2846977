"""A small Markdown-to-HTML converter for the spec sections and framework READMEs of the site.

It covers what those files use: ATX headings, paragraphs, fenced code, pipe tables, bullet and
numbered lists (nested by indentation, with continuation lines), block quotes, and inline code,
links, images, bold and emphasis. Everything else is text: raw HTML is escaped, never passed through.
HTML comments (the generated-block markers) are dropped.

Links are resolved by the caller: `link(url)` returns the href to use inside the site, or None to
render the link's text alone (an external URL is then shown after it, as text: the site has no
http(s) href or src).
"""

from __future__ import annotations

import html
import re
from collections.abc import Callable

Linker = Callable[[str], "str | None"]

_FENCE = re.compile(r"^\s*(```|~~~)")
_HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")
_ITEM = re.compile(r"^(\s*)([-*+]|\d{1,9}[.)])\s+(.*)$")
_TABLE_RULE = re.compile(r"^\s*\|?\s*:?-{2,}:?\s*(\|\s*:?-{2,}:?\s*)*\|?\s*$")
_COMMENT = re.compile(r"^\s*<!--.*-->\s*$")
_INLINE = re.compile(
    r"(?P<code>(?P<ticks>`+)(?P<code_text>.+?)(?P=ticks))"
    r"|(?P<image>!\[(?P<alt>[^\]]*)\]\((?P<src>[^)\s]+)\))"
    r"|(?P<link>\[(?P<text>(?:[^\]`]|`[^`]*`)+)\]\((?P<url>[^)\s]+)\))"
    r"|(?P<bold>\*\*(?P<bold_text>\S(?:.*?\S)?)\*\*)"
    r"|(?P<em>(?<![\w*])\*(?P<em_text>[^\s*](?:[^*]*[^\s*])?)\*(?![\w*]))"
)


def slug(text: str) -> str:
    """The anchor id of a heading, as GitHub makes them (lower case, punctuation dropped, spaces to -)."""
    text = re.sub(r"[^\w\- ]", "", text.lower()).strip()
    return re.sub(r" ", "-", text)


def inline(text: str, link: Linker) -> str:
    """One line (or a joined paragraph) of inline Markdown as HTML."""
    out: list[str] = []
    pos = 0
    for m in _INLINE.finditer(text):
        out.append(html.escape(text[pos:m.start()], quote=False))
        pos = m.end()
        if m.group("code"):
            out.append(f"<code>{html.escape(m.group('code_text').strip(), quote=False)}</code>")
        elif m.group("image"):
            href = link(m.group("src"))
            alt = html.escape(m.group("alt"))
            out.append(f'<img src="{html.escape(href)}" alt="{alt}">' if href else alt)
        elif m.group("link"):
            label = inline(m.group("text"), link)
            url = m.group("url")
            href = link(url)
            if href is not None:
                out.append(f'<a href="{html.escape(href)}">{label}</a>')
            elif re.match(r"^https?://", url):
                out.append(f"{label} ({html.escape(url, quote=False)})")
            else:
                out.append(label)
        elif m.group("bold"):
            out.append(f"<strong>{inline(m.group('bold_text'), link)}</strong>")
        else:
            out.append(f"<em>{inline(m.group('em_text'), link)}</em>")
    out.append(html.escape(text[pos:], quote=False))
    return "".join(out)


def _cells(line: str) -> list[str]:
    """The cells of a pipe-table line (a `|` inside backticks or escaped as `\\|` is not a divider)."""
    line = line.strip().removeprefix("|")
    if line.endswith("|") and not line.endswith("\\|"):
        line = line[:-1]
    cells, current, in_code = [], [], False
    i = 0
    while i < len(line):
        ch = line[i]
        if ch == "\\" and i + 1 < len(line) and line[i + 1] == "|":
            current.append("|")
            i += 2
            continue
        if ch == "`":
            in_code = not in_code
        if ch == "|" and not in_code:
            cells.append("".join(current).strip())
            current = []
        else:
            current.append(ch)
        i += 1
    cells.append("".join(current).strip())
    return cells


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip(" "))


def _starts_block(lines: list[str], i: int) -> bool:
    line = lines[i]
    return bool(_FENCE.match(line) or _HEADING.match(line) or _ITEM.match(line) or line.lstrip().startswith(">")
                or (line.lstrip().startswith("|") and i + 1 < len(lines) and _TABLE_RULE.match(lines[i + 1])))


def to_html(text: str, link: Linker) -> str:
    """A Markdown document as an HTML fragment."""
    return "\n".join(_blocks(text.expandtabs(4).splitlines(), link))


def _blocks(lines: list[str], link: Linker) -> list[str]:
    out: list[str] = []
    i = 0
    while i < len(lines):
        line = lines[i]
        if not line.strip() or _COMMENT.match(line):
            i += 1
            continue
        if _FENCE.match(line):
            fence = _FENCE.match(line).group(1)
            body: list[str] = []
            i += 1
            while i < len(lines) and not lines[i].lstrip().startswith(fence):
                body.append(lines[i])
                i += 1
            i += 1  # the closing fence
            out.append(f"<pre><code>{html.escape(chr(10).join(body), quote=False)}</code></pre>")
            continue
        heading = _HEADING.match(line)
        if heading:
            level, title = len(heading.group(1)), heading.group(2)
            out.append(f'<h{level} id="{slug(title)}">{inline(title, link)}</h{level}>')
            i += 1
            continue
        if line.lstrip().startswith("|") and i + 1 < len(lines) and _TABLE_RULE.match(lines[i + 1]):
            header = _cells(line)
            i += 2
            rows = []
            while i < len(lines) and lines[i].lstrip().startswith("|"):
                rows.append(_cells(lines[i]))
                i += 1
            head = "".join(f"<th>{inline(c, link)}</th>" for c in header)
            body_rows = "".join(
                "<tr>" + "".join(f"<td>{inline(c, link)}</td>" for c in row) + "</tr>" for row in rows)
            out.append(f'<div class="table-wrap"><table><thead><tr>{head}</tr></thead><tbody>{body_rows}</tbody></table></div>')
            continue
        if line.lstrip().startswith(">"):
            quoted = []
            while i < len(lines) and lines[i].lstrip().startswith(">"):
                quoted.append(re.sub(r"^\s*>\s?", "", lines[i]))
                i += 1
            out.append("<blockquote>" + "\n".join(_blocks(quoted, link)) + "</blockquote>")
            continue
        if _ITEM.match(line):
            i = _list(lines, i, link, out)
            continue
        para = []
        while i < len(lines) and lines[i].strip() and not _COMMENT.match(lines[i]) and (not para or not _starts_block(lines, i)):
            para.append(lines[i])
            i += 1
        out.append("<p>" + _joined(para, link) + "</p>")
    return out


def _joined(lines: list[str], link: Linker) -> str:
    """Paragraph lines joined by spaces; a line ending in two spaces or a backslash breaks the line."""
    parts = []
    for n, line in enumerate(lines):
        hard = line.endswith(("  ", "\\"))
        text = inline(line.rstrip(" \\").strip(), link)
        parts.append(text + ("<br>" if hard and n < len(lines) - 1 else ""))
    return " ".join(parts).replace("<br> ", "<br>")


def _list(lines: list[str], i: int, link: Linker, out: list[str]) -> int:
    """A list starting at line i (its first item); appends it to out and returns the next line."""
    first = _ITEM.match(lines[i])
    base = len(first.group(1))
    ordered = first.group(2)[0].isdigit()
    items: list[list[str]] = []
    while i < len(lines):
        line = lines[i]
        item = _ITEM.match(line)
        if item and len(item.group(1)) == base and item.group(2)[0].isdigit() == ordered:
            content_indent = len(line) - len(item.group(3))
            items.append([item.group(3)])
            i += 1
            continue
        if not line.strip():
            # a blank line ends the list unless the next text is indented under the item
            nxt = i + 1
            if nxt < len(lines) and lines[nxt].strip() and _indent(lines[nxt]) > base:
                items[-1].append("")
                i += 1
                continue
            break
        if _indent(line) > base or not _starts_block(lines, i):
            # nested content keeps its indentation relative to the item's text; a lazy
            # continuation line (not indented) is joined to the item's paragraph
            items[-1].append(line[min(_indent(line), content_indent):] if _indent(line) > base else line.strip())
            i += 1
            continue
        break
    tag = "ol" if ordered else "ul"
    rendered = []
    for body in items:
        blocks = _blocks(body, link)
        if len(blocks) >= 1 and blocks[0].startswith("<p>"):
            blocks[0] = blocks[0][3:-4]  # a tight item: its first paragraph without <p>
        rendered.append("<li>" + "\n".join(blocks) + "</li>")
    out.append(f"<{tag}>" + "".join(rendered) + f"</{tag}>")
    return i
