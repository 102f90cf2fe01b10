"""flagperf/untrusted.py, the one way out for text from hosts, result files and configs, and every output that
shows a summary: a catalogue of hostile payloads is put into every string field of a Summary, and the terminal
table and lines (run, report, compare, check, the live panel, the run's say path), report.md (rendered by a
CommonMark parser) and report.html must show each payload as inert text and keep the structure a benign summary
has. (tests/e2e/test_untrusted_output.py runs ``flagperf report`` in a real pty and report.html in Chromium.)"""

import ast
import html
import logging
import re
import threading
import time
from html.parser import HTMLParser
from pathlib import Path

import pytest
from markdown_it import MarkdownIt
from rich.console import Console as RichConsole
from rich.text import Text

from flagperf.checks import HostCheck, interpret_probe
from flagperf.progress import Console, LiveProgress
from flagperf.records import Failure, Ranking, ReferenceVerdict
from flagperf.render import check_table
from flagperf.reporters import reporter
from flagperf.reporters.compare import comparison_lines, comparison_table
from flagperf.reporters.html import HtmlReporter
from flagperf.results.compare import compare_summaries
from flagperf.results.interpret import Status
from flagperf.results.summary import CaseSummary, NodeSummary, RoundSummary, Summary
from flagperf.untrusted import (MAX_CHARS, for_html, for_markdown, for_markup, for_rich, for_terminal,
                                markdown_code, markdown_fence)

REPO = Path(__file__).resolve().parents[2]

# name: payload. Every one must come out as text, never as what it asks for.
PAYLOADS = {
    "csi_clear": "\x1b[2J\x1b[H",
    "csi_red": "\x1b[31mRED\x1b[0m",
    "osc0_bel": "\x1b]0;pwned-title\x07",
    "osc0_st": "\x1b]0;pwned-title\x1b\\",
    "osc8_link": "\x1b]8;;https://evil.example/\x07click\x1b]8;;\x07",
    "osc52_clip": "\x1b]52;c;cm0gLXJmIH4=\x07",
    "c1_csi": "\x9b2J\x9d0;t\x9c",
    "rich_close": "[/]",
    "rich_style": "[bold red]x",
    "rich_link": "[link=https://evil.example]y[/link]",
    "md_heading": "\n# forged heading\n",
    "md_row": "a\n| forged | row |\n|---|---|",
    "md_link": "[click](javascript:alert(1))",
    "md_image": "![x](https://evil.example/p.png)",
    "md_autolink": "<javascript:alert(1)>",
    "backticks": "```\n</pre>`` ` `",
    "script": "<script>document.title='pwned'</script>",
    "img_onerror": "<img src=x onerror=\"document.title='pwned'\">",
    "js_href": "<a href=\"javascript:alert(1)\">x</a>",
    "bidi": "abc\u202edcba\u2066x\u2069\u202a\u202c",
    "nul_del": "a\x00b\x7fc\rd\x08",
    "emphasis": "_x_ *y* ~~z~~ \\",
    "megabyte": "M" * (1 << 20),
}
# what may not reach a terminal: C0 controls but newline and tab, DEL, C1 controls, bidi overrides and isolates
TERMINAL_FORBIDDEN = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069\u200e\u200f\u061c]")
SGR = re.compile(r"\x1b\[[0-9;]*m")


def hostile_summary(p: str, run_dir: str | None = None) -> Summary:
    """A summary with ``p`` in every string field a reporter may show: run, hosts, host checks, cases, rounds,
    failures and their last lines, FINISHED fields (metric, unit, metrics, env, origin), nodes and their monitor
    notes, reference verdicts, rankings."""
    fin = {"metric": p, "unit": p, "value": 10.0, "e2e_time": 2.0, "higher_is_better": True, "origin": p,
           "metrics": {p: {"value": 1.5, "unit": p}, "latency": {"value": 0.5, "unit": p}},
           "env": {p: p, "torch": p}, "checks": {p: p}}
    failure = Failure(p, p, 0, 1, p, (p, p + p[:1]), (p,))
    node = NodeSummary(p, p, 0, 0, [], {"cpu": {"util_pct_mean": 5.0}, "unavailable": {p: p}, "unreadable": {p: p}},
                       Status.PASSED, None, dict(fin))
    bad_node = NodeSummary(p, p, 1, 1, [], {}, Status.FAILED, failure, None)
    rounds = [RoundSummary(1, p, Status.PASSED, 1.0, None, dict(fin), [node]),
              RoundSummary(2, p, Status.PASSED, 1.0, None, dict(fin, value=12.0), [node]),
              RoundSummary(3, p, Status.FAILED, 1.0, failure, None, [bad_node])]
    verdicts = [ReferenceVerdict(p, 11.0, 2, p, 20.0, 0.05, None, True, p, p, -0.45, "below", False, p, p),
                ReferenceVerdict(p, 11.0, 2, p, 10.0, 0.05, None, True, p, p, 0.1, "above", True, p, None)]
    case = CaseSummary(p, p, p, p, p, 1, 1, 3, p, rounds, verdicts=verdicts)
    each = CaseSummary(p + "2", p, p, p, p, 2, 1, 3, p, rounds[:2], each=True)
    ranking = Ranking.from_dict({"case": p, "metric": p, "unit": p, "higher_is_better": True, "rule": p,
                                 "median": 10.0, "failed_hosts": [p],
                                 "entries": [{"host": p, "gpu": None, "value": 1.0, "score": 9.0, "outlier": True,
                                              "rank": 1, "rounds": 2},
                                             {"host": p, "gpu": 0, "value": 2.0, "score": 0.1, "outlier": False,
                                              "rank": 2, "rounds": 2}]})
    checks = [{"host": p, "outcome": p, "detail": p, "remedy": p}]
    return Summary(p, p if run_dir is None else run_dir, p, p, p, 60.0, False, p, p, p, [p, p], checks,
                   [case, each], [ranking], None)


# Strings of summary.json that are flagperf's own words, not a field's text: statuses, verdict results, schema
OWN_WORDS = {s.value for s in Status} | {"below", "above", "flagperf.summary/1"}


def string_leaves(value, where="") -> list:
    """(path, string) of every string in a JSON-like value, keys included."""
    out = []
    if isinstance(value, dict):
        for k, v in value.items():
            out.append((f"{where}.{k} (key)", k))
            out += string_leaves(v, f"{where}.{k}")
    elif isinstance(value, (list, tuple)):
        for i, v in enumerate(value):
            out += string_leaves(v, f"{where}[{i}]")
    elif isinstance(value, str):
        out.append((where, value))
    return out


def test_every_string_field_of_the_summary_carries_the_payload():
    """The hostile summary leaves no string field of the model benign (a new field must be added to it)."""
    s = hostile_summary("PAYLOAD")
    fields = [(w, v) for w, v in string_leaves(s.to_dict()) if not w.endswith("(key)")]
    benign = [(w, v) for w, v in fields if "PAYLOAD" not in v and v not in OWN_WORDS]
    assert benign == []
    assert len(fields) > 60


# ----------------------------------------------------------------------------------------------- the functions
@pytest.mark.parametrize("name", sorted(PAYLOADS))
def test_for_terminal_leaves_no_control_character(name):
    p = PAYLOADS[name]
    out = for_terminal(p)
    assert not TERMINAL_FORBIDDEN.search(out) and "\n" not in out
    assert len(out) <= MAX_CHARS + 40
    kept = for_terminal(p, newlines=True)
    assert not TERMINAL_FORBIDDEN.search(kept) and kept.count("\n") == p[:MAX_CHARS].count("\n")


def test_for_terminal_shows_what_it_escaped():
    assert for_terminal("\x1b[31mred\x1b[0m") == "\\x1b[31mred\\x1b[0m"
    assert for_terminal("\x1b]52;c;eA==\x07") == "\\x1b]52;c;eA==\\x07"
    assert for_terminal("a\u202eb\u2066c") == "a\\u202eb\\u2066c"
    assert for_terminal("a\x00b\x7f\x9b") == "a\\x00b\\x7f\\x9b"
    assert for_terminal("a\nb") == "a\\x0ab" and for_terminal("a\nb", newlines=True) == "a\nb"
    assert for_terminal("tab\there, plain text: 3.5 TFLOP/s [1/2]") == "tab\there, plain text: 3.5 TFLOP/s [1/2]"
    assert for_terminal(None) == "" and for_terminal(42) == "42"
    long = for_terminal("x" * (MAX_CHARS + 10))
    assert long == "x" * MAX_CHARS + " ... (10 more characters)"


@pytest.mark.parametrize("text", ["[/]", "[bold red]x", "[link=https://e.example]y[/link]", "x\\", "[[/]"])
def test_rich_text_and_markup_are_never_parsed(text):
    console = RichConsole(record=True, width=200, color_system="truecolor", force_terminal=True)
    rendered = for_rich(text, "red")
    assert isinstance(rendered, Text)
    console.print(rendered)
    console.print(f"[green]{for_markup(text)}[/]")
    out = console.export_text()
    assert out.splitlines() == [text, text]


def test_markdown_text_is_inert():
    md = MarkdownIt("commonmark").enable("table").enable("strikethrough")
    for p in PAYLOADS.values():
        out = for_markdown(p)
        assert "\n" not in out and "<" not in out and ">" not in out
        rendered = md.render(f"text {out} text")
        assert re.findall(r"<(\w+)", rendered) == ["p"], (p[:80], rendered[:300])
        shown = for_terminal(p.replace("\n", " ").replace("\r", " "))[:100]
        assert html.unescape(rendered).startswith("<p>text " + shown), (p[:80], rendered[:300])
    assert for_markdown("localhost_noderank0 a|b") == "localhost_noderank0 a\\|b"


def test_markdown_code_and_fence_cannot_be_closed_early():
    md = MarkdownIt("commonmark")
    for p in ("a`b", "``", "`", "x ```` y", PAYLOADS["backticks"]):
        rendered = md.render(f"see {markdown_code(p)} here")
        assert rendered.count("<code>") == 1 and re.findall(r"<(\w+)", rendered) == ["p", "code"], rendered
        block = "\n".join(markdown_fence([p, "after " + p]))
        rendered = md.render(block + "\n\nnext\n")
        assert rendered.count("<pre>") == 1 and rendered.endswith("<p>next</p>\n"), rendered
    assert markdown_fence(["plain"]) == ["```", "plain", "```"]
    assert markdown_code("") == "``" and markdown_code("/r/x.log") == "`/r/x.log`"


def test_for_html():
    assert for_html("<b a=\"x\">&\x1b[2J") == "&lt;b a=&quot;x&quot;&gt;&amp;\\x1b[2J"
    assert for_html("a\nb") == "a\nb" and for_html("a\nb", newlines=False) == "a\\x0ab"


# ----------------------------------------------------------------------------------------------- the terminal
def terminal_outputs(s: Summary, color: bool) -> str:
    """What ``flagperf run`` and ``flagperf report`` print of a summary, and ``flagperf compare`` of it against
    itself, as the terminal gets it (``color``: with rich's own escape codes)."""
    console = RichConsole(record=not color, width=400, force_terminal=color,
                          color_system="truecolor" if color else None, highlight=False, soft_wrap=True, emoji=False)
    term = reporter("terminal")
    with console.capture() as cap:
        console.print(term.render(s))
        for table in term.rankings(s):
            console.print(table)
        for line in term.outlier_lines(s) + term.failure_lines(s):
            console.print(line, markup=False)
        cmp = compare_summaries(s, s)
        console.print(comparison_table(cmp))
        for line in comparison_lines(cmp):
            console.print(line, markup=False)
    return cap.get()


@pytest.mark.parametrize("name", sorted(PAYLOADS))
def test_terminal_shows_every_payload_as_text(name):
    p = PAYLOADS[name]
    s = hostile_summary(p)
    plain = terminal_outputs(s, color=False)
    assert not TERMINAL_FORBIDDEN.search(plain), repr(TERMINAL_FORBIDDEN.search(plain))
    if name.startswith("rich_"):
        assert p in plain                           # shown as written, never parsed
    if name != "megabyte":
        assert for_terminal(p) in plain
    assert len(plain) < 4 * 1024 * 1024             # a 1 MB field is shown capped
    colored = terminal_outputs(s, color=True)
    assert SGR.sub("", colored).count("\x1b") == 0  # rich's own colour codes, nothing else
    assert not TERMINAL_FORBIDDEN.search(SGR.sub("", colored))


def test_a_markup_metric_name_is_neither_a_crash_nor_a_style():
    s = hostile_summary("[bold red]x")
    out = terminal_outputs(s, color=True)
    assert "\x1b[1;31mx" not in out and "[bold red]x" in SGR.sub("", out)
    terminal_outputs(hostile_summary("[/]"), color=True)     # no MarkupError


@pytest.mark.parametrize("name", ["csi_red", "osc52_clip", "rich_close", "rich_style", "bidi", "nul_del"])
def test_check_table_with_a_hostile_probe_answer(name):
    p = PAYLOADS[name]
    console = RichConsole(record=True, width=300, color_system=None)
    console.print(check_table([HostCheck(p, "error", f"probe failed (exit 1): {p}", p),
                               HostCheck("h2", "ok", p)]))
    out = console.export_text()
    assert not TERMINAL_FORBIDDEN.search(out) and for_terminal(p) in out


@pytest.mark.parametrize("name", ["csi_clear", "osc52_clip", "rich_close", "rich_style", "bidi", "megabyte"])
def test_check_of_a_probe_that_answers_hostile_text(name):
    """What ``flagperf check`` prints of a probe whose answer (its stderr, its exit) carries the payload."""
    p = PAYLOADS[name]
    results = [interpret_probe(p, "python3", code, p, p, fp="/fp", launcher_dir="/fp/launcher", result_root="/r",
                               need=1, vendor=None, runtime="bare") for code in (1, 127)]
    assert all(not r.ok for r in results)
    console = RichConsole(record=True, width=300, color_system="truecolor", force_terminal=True)
    console.print(check_table(results))
    out = console.export_text(styles=True)
    assert SGR.sub("", out).count("\x1b") == 0 and not TERMINAL_FORBIDDEN.search(SGR.sub("", out))
    if name.startswith("rich_"):
        assert p in SGR.sub("", out)


@pytest.mark.parametrize("name", ["csi_clear", "osc52_clip", "rich_close", "rich_style", "bidi", "megabyte"])
def test_the_run_console_and_the_live_panel(name):
    p = PAYLOADS[name]
    said: list = []
    console = Console(say=said.append, log=logging.getLogger("flagperf.test-untrusted"))
    console.step(f"case {p}: round 1 failed: {p}")
    console.step(f"host {p} is slow", logging.WARNING)
    console.lines([p, "ok"])
    console.say(f"ERROR: cannot create the run directory {p}")
    text = "\n".join(said)
    assert not TERMINAL_FORBIDDEN.search(text) and len(text) < 200_000
    rich_console = RichConsole(record=True, width=300, color_system=None, force_terminal=False)
    live = LiveProgress.__new__(LiveProgress)       # the panel's state and rendering, without starting Live
    live.lock, live.text, live.label, live.nodes, live.timeout_s, live.t0 = (threading.Lock(), "", None, {}, 1.0,
                                                                               time.monotonic())
    live.stage(p)
    live.round(p, [p, "n2"], 10)
    live.node(p, p, p)
    rich_console.print(live._render())
    live.round_done(p)
    rich_console.print(live._render())
    out = rich_console.export_text()
    assert not TERMINAL_FORBIDDEN.search(out)
    if name.startswith("rich_"):
        assert p in out


# ----------------------------------------------------------------------------------------------- report.md
MD = MarkdownIt("commonmark").enable("table").enable("strikethrough")
MD_TAGS = {"h1", "h2", "p", "ul", "li", "strong", "code", "table", "thead", "tbody", "tr", "th", "td", "pre"}


def md_structure(text: str) -> list:
    return re.findall(r"<(/?\w+)", MD.render(text))


@pytest.mark.parametrize("name", sorted(PAYLOADS))
def test_report_md_shows_every_payload_as_text(name):
    p = PAYLOADS[name]
    text = reporter("markdown").render(hostile_summary(p))
    benign = reporter("markdown").render(hostile_summary("benign"))
    assert md_structure(text) == md_structure(benign)        # no heading, row, link, image or HTML forged
    assert {t.lstrip("/") for t in md_structure(text)} <= MD_TAGS
    assert not TERMINAL_FORBIDDEN.search(text)
    assert len(text) < 8 * 1024 * 1024
    rendered = MD.render(text)
    for tag in ("<script", "<img", "<a ", "<iframe", "javascript:alert(1)\""):
        assert tag not in rendered


# ----------------------------------------------------------------------------------------------- report.html
class _Tags(HTMLParser):
    """Start tags with their attribute names, outside script contents; and the text of every script."""

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.tags: list = []
        self.scripts: list = []
        self._in_script = False

    def handle_starttag(self, tag, attrs):
        self.tags.append((tag, tuple(sorted(a for a, _ in attrs))))
        self._in_script = tag == "script"
        if self._in_script:
            self.scripts.append("")

    def handle_endtag(self, tag):
        if tag == "script":
            self._in_script = False

    def handle_data(self, data):
        if self._in_script:
            self.scripts[-1] += data


def html_page(s: Summary) -> tuple:
    rep = HtmlReporter()
    page = rep.page(s, None)
    parser = _Tags()
    parser.feed(page)
    return page, parser


def csp_of(page: str) -> str:
    return re.search(r'http-equiv="Content-Security-Policy" content="([^"]*)"', page).group(1)


@pytest.mark.parametrize("name", sorted(PAYLOADS))
def test_report_html_shows_every_payload_as_text(name):
    p = PAYLOADS[name]
    page, parsed = html_page(hostile_summary(p))
    _, benign = html_page(hostile_summary("benign"))
    assert parsed.tags == benign.tags                   # no element or attribute forged
    assert not TERMINAL_FORBIDDEN.search(page.replace("\n", ""))
    assert len(page) < 16 * 1024 * 1024
    if name in ("script", "img_onerror", "js_href"):
        assert html.escape(p) in page
    # no script at all (the charts are inline SVG), and a CSP that admits none: default-src 'none', no script-src
    csp = csp_of(page)
    assert parsed.scripts == [] and not any(tag == "script" for tag, _ in parsed.tags)
    assert not any(a.startswith("on") for _, attrs in parsed.tags for a in attrs)
    assert "script-src" not in csp and "'unsafe-eval'" not in csp and csp.startswith("default-src 'none';")
    assert any(tag == "svg" for tag, _ in parsed.tags)


# ----------------------------------------------------------------------------------------------- no bypass
OUTPUT_MODULES = ("flagperf/reporters/terminal.py", "flagperf/reporters/compare.py", "flagperf/render.py",
                  "flagperf/cli.py", "flagperf/progress.py")


def _markup_with_values(node) -> bool:
    """An f-string that writes rich markup around a formatted value: f"[red]{x}[/]"."""
    if not isinstance(node, ast.JoinedStr):
        return False
    text = "".join(v.value for v in node.values if isinstance(v, ast.Constant) and isinstance(v.value, str))
    return bool(re.search(r"\[/?[a-z#@][^\]]*\]", text)) and any(isinstance(v, ast.FormattedValue)
                                                                  for v in node.values)


def test_no_output_module_writes_markup_around_a_value_it_did_not_escape():
    """rich markup built from a value must escape that value (for_markup); a plain value goes in as for_rich's
    Text or with markup=False."""
    problems = []
    for rel in OUTPUT_MODULES:
        tree = ast.parse((REPO / rel).read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if _markup_with_values(node):
                bare = [v for v in node.values if isinstance(v, ast.FormattedValue)
                        and not (isinstance(v.value, ast.Call) and getattr(v.value.func, "id", "") == "for_markup")]
                if bare:
                    problems.append(f"{rel}:{node.lineno}: markup around an unescaped value")
    assert problems == []


def test_markdown_and_html_reporters_escape_through_the_boundary():
    """The Markdown and HTML reporters escape with flagperf.untrusted only (no html.escape or hand-made escaping
    of their own)."""
    for rel in ("flagperf/reporters/markdown.py", "flagperf/reporters/html.py", "flagperf/reporters/svg.py"):
        source = (REPO / rel).read_text(encoding="utf-8")
        assert "from flagperf.untrusted import" in source
        assert "html.escape" not in source and '.replace("|"' not in source
