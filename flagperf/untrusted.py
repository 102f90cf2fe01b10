"""The one way out for text flagperf does not control: what came from a host, a benchmark, a result file or a
config (metric names, units, failure reasons and last lines, node and host names, FINISHED fields, verdict notes,
host check details, probe answers, warnings).

Each function makes such a text inert for one destination:

- :func:`for_terminal`: a plain terminal line. C0 and C1 control characters (ESC, BEL, NUL, CR, DEL, ...) and the
  bidirectional overrides and isolates are shown as visible escapes (``\\x1b[2J``, ``\\u202e``), so no escape
  sequence (CSI, OSC 0/8/52, ...) reaches the terminal; newlines are kept or shown escaped as the caller asks.
- :func:`for_rich`: the same as a :class:`rich.text.Text`, which rich never parses as markup (``[/]`` and
  ``[bold red]`` stay text); :func:`for_markup`: the same as escaped markup, for a string that is markup anyway.
- :func:`for_markdown`, :func:`markdown_code`, :func:`markdown_fence`: report.md's text, inline code and fenced
  blocks (no HTML, no link, image, heading or table row can be forged, and no code span or fence closed early).
- :func:`for_html`: text for an HTML page (escaped, controls made visible).

Every text is capped at ``MAX_CHARS`` characters, with a visible marker saying how much was left out.
"""

from __future__ import annotations

import html
import math
import re

from rich.markup import escape
from rich.text import Text

MAX_CHARS = 4096            # characters of one untrusted text that are shown; the rest is counted, not shown

# Bidirectional embeddings, overrides, isolates and marks (they reorder what the reader sees), and the Unicode
# line and paragraph separators (a line break a terminal or a viewer may honour).
_INVISIBLE = (list(range(0x202A, 0x202F)) + list(range(0x2066, 0x206A)) + [0x200E, 0x200F, 0x061C, 0x2028, 0x2029,
                                                                            0xFEFF])


def _visible(code: int) -> str:
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


_CONTROLS = {c: _visible(c) for c in [*range(0x00, 0x20), *range(0x7F, 0xA0), *_INVISIBLE] if c != 0x09}
_KEEP_NEWLINES = {**_CONTROLS, 0x0A: "\n"}
_NEWLINES_AS_SPACES = {**_CONTROLS, 0x0A: " ", 0x0D: " "}


def finite_number(value) -> bool:
    """Whether a value read from a host's record is a number that arithmetic may use: an int or a float, not a bool
    (JSON's true is not 1), and finite (a payload may carry NaN or Infinity)."""
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _text(value) -> str:
    return "" if value is None else value if isinstance(value, str) else str(value)


def _capped(s: str, limit: int) -> str:
    if len(s) <= limit:
        return s
    return s[:limit] + f" ... ({len(s) - limit} more characters)"


def for_terminal(value, newlines: bool = False, limit: int = MAX_CHARS) -> str:
    """``value`` as text that a terminal shows and never obeys: control characters and bidi overrides as visible
    escapes (``\\x1b``, ``\\x07``, ``\\u202e``); a newline kept when ``newlines``, else shown as ``\\x0a``; capped
    at ``limit`` characters with a marker."""
    return _capped(_text(value), limit).translate(_KEEP_NEWLINES if newlines else _CONTROLS)


def for_rich(value, style: str = "", newlines: bool = False, limit: int = MAX_CHARS) -> Text:
    """``value`` for a rich table or print: :func:`for_terminal`'s text as a :class:`rich.text.Text` (never read
    as markup), in ``style``."""
    return Text(for_terminal(value, newlines, limit), style=style)


def for_markup(value, newlines: bool = False, limit: int = MAX_CHARS) -> str:
    """``value`` as a piece of rich markup that shows as itself: :func:`for_terminal`'s text with every ``[`` that
    could open a tag (and a trailing backslash) escaped by :func:`rich.markup.escape`; for a string that is
    markup anyway (``f"[red]{for_markup(x)}[/]"``). :func:`for_rich` is simpler where a ``Text`` will do."""
    return escape(for_terminal(value, newlines, limit))


_MD_ESCAPES = {ord(c): "\\" + c for c in "\\`*[]|~"}
_MD_ESCAPES.update({ord("<"): "&lt;", ord(">"): "&gt;", ord("&"): "&amp;"})
_EMPHASIS_UNDERSCORE = re.compile(r"(?<![0-9A-Za-z])_|_(?![0-9A-Za-z])")   # one inside a word cannot emphasise


def _one_line(value, limit: int) -> str:
    return _capped(_text(value), limit).translate(_NEWLINES_AS_SPACES)


def for_markdown(value, limit: int = MAX_CHARS) -> str:
    """``value`` as Markdown text that renders as itself: one line (newlines as spaces, so no heading or table row
    is forged), control characters visible, Markdown's ``\\ ` * [ ] | ~`` and emphasis underscores
    backslash-escaped, ``< > &`` as entities (no HTML, link, image or code span)."""
    s = _one_line(value, limit).translate(_MD_ESCAPES)
    return _EMPHASIS_UNDERSCORE.sub(r"\\_", s)


def _longest_backtick_run(s: str) -> int:
    return max((len(m) for m in re.findall(r"`+", s)), default=0)


def markdown_code(value, limit: int = MAX_CHARS) -> str:
    """``value`` as an inline Markdown code span: one line, control characters visible, delimited by more
    backticks than any run inside it (so it cannot be closed early)."""
    s = _one_line(value, limit)
    if not s:
        return "``"
    ticks = "`" * (_longest_backtick_run(s) + 1)
    pad = " " if s.startswith("`") or s.endswith("`") or (s.startswith(" ") and s.endswith(" ")) else ""
    return f"{ticks}{pad}{s}{pad}{ticks}"


def markdown_fence(lines, limit: int = MAX_CHARS) -> list:
    """``lines`` as a fenced Markdown code block (a list of lines, fences included): each line one line with its
    control characters visible, and a fence longer than any backtick run inside (at least three)."""
    body = [for_terminal(line, limit=limit) for line in lines]
    fence = "`" * max(3, _longest_backtick_run("\n".join(body)) + 1)
    return [fence, *body, fence]


def for_html(value, newlines: bool = True, limit: int = MAX_CHARS) -> str:
    """``value`` as HTML text: :func:`for_terminal`'s text, HTML-escaped (quotes too, so also an attribute's
    value)."""
    return html.escape(for_terminal(value, newlines, limit), quote=True)
