"""The HTML form of `flagperf compare` (flagperf/reporters/compare.py): the two runs side by side, the change and
the evidence per metric, the outcome coloured; every text from a summary escaped; report.html's CSP, no script,
nothing loaded; written into run B's directory or --out."""
import html.parser


from flagperf.reporters.compare import comparison_html, html_file_name
from flagperf.reporters.html import CSP
from flagperf.results.compare import compare_summaries
from flagperf.results.summary import SUMMARY_SCHEMA, Summary


def rnd(i, value, metrics=None, metric="tflops", unit="TFLOP/s"):
    return {"round": i, "status": "passed",
            "finished": {"metric": metric, "unit": unit, "higher_is_better": True, "value": value, "e2e_time": 1.0,
                         "metrics": {k: {"value": v[i - 1], "unit": u} for k, (v, u) in (metrics or {}).items()}}}


def case(key, values, metrics=None, name=None, **kw):
    return {"name": name or key.replace(":", "-"), "key": key,
            "rounds": [rnd(i + 1, v, metrics, **kw) for i, v in enumerate(values)]}


def summary(run_id, *cases) -> Summary:
    return Summary.from_dict({"schema": SUMMARY_SCHEMA, "run_id": run_id, "cases": list(cases)})


class Page(html.parser.HTMLParser):
    """Tags, attributes, text and the CSP of a page."""

    def __init__(self, text):
        super().__init__()
        self.tags, self.attrs, self.text, self.csp = [], [], [], None
        self.feed(text)

    def handle_starttag(self, tag, attrs):
        self.tags.append(tag)
        self.attrs += attrs
        d = dict(attrs)
        if tag == "meta" and d.get("http-equiv") == "Content-Security-Policy":
            self.csp = d["content"]

    def handle_data(self, data):
        self.text.append(data)


def pages():
    a = summary("ra", case("gemm:pytorch:x:1:1:5", [10.0, 10.2, 9.9, 10.1, 10.0], {"time_ms": ([1.0] * 5, "ms")}),
                case("one:f:h:1:1:1", [5.0]))
    b = summary("rb", case("gemm:pytorch:x:1:1:5", [7.0, 7.1, 6.9, 7.2, 7.0], {"time_ms": ([1.0] * 5, "ms")}),
                case("one:f:h:1:1:1", [5.4]))
    return compare_summaries(a, b)


def test_page_side_by_side_change_outcome_and_evidence():
    cmp = pages()
    text = comparison_html(cmp)
    page = Page(text)
    words = " ".join(page.text)
    assert "1 regression" in words and "gemm-pytorch-x-1-1-5" in words and "one-f-h-1-1-1" in words
    # A and B side by side: rounds, median, min - max, spread of each; the change; the test; the outcome
    assert '<th colspan="4" class="side">A</th><th colspan="4" class="side">B</th>' in text
    assert "-30.0%" in words and "MWU exact p=0.00794" in words and "n<3: no test" in words
    assert '<td class="outcome regression">regression</td>' in text
    assert '<td class="outcome insufficient">insufficient evidence</td>' in text
    assert '<td class="outcome quiet">unchanged</td>' in text
    assert "9.9 &ndash; 10.2" in text and "3.0%" in words
    assert "REGRESSION gemm-pytorch-x-1-1-5 tflops" in words      # the text form's lines
    assert html_file_name(cmp) == "compare-ra-rb.html"


def test_page_csp_no_script_nothing_loaded():
    page = Page(comparison_html(pages()))
    assert page.csp == CSP
    assert page.csp.startswith("default-src 'none';") and "script-src" not in page.csp     # no script admitted
    assert "script" not in page.tags and not {"img", "link", "iframe", "object", "embed"} & set(page.tags)
    assert not [a for a in page.attrs if a[0] in ("src", "href") or a[0].startswith("on")]


HOSTILE = '<script>alert(1)</script><img src=x onerror=alert(2)>\x1b[2J"\'&\u202e'


def test_every_text_from_a_summary_is_escaped():
    a = summary(HOSTILE, case(HOSTILE, [1.0], {HOSTILE: ([2.0], HOSTILE)}, name=HOSTILE, metric=HOSTILE, unit=HOSTILE))
    b = summary("../../" + HOSTILE, case(HOSTILE, [0.5], {HOSTILE: ([2.0], HOSTILE)}, name=HOSTILE, metric=HOSTILE,
                                         unit="other"))
    cmp = compare_summaries(a, b)
    text = comparison_html(cmp)
    page = Page(text)
    assert page.tags.count("script") == 0 and "img" not in page.tags
    assert not [n for n, _ in page.attrs if n.startswith("on")]
    assert "\x1b" not in text and "\u202e" not in text and "\\x1b[2J" in text and "\\u202e" in text
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in text
    name = html_file_name(cmp)
    assert name.startswith("compare-_script_alert_1_") and "/" not in name and ".." not in name
    assert set(name) <= set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.-")


def test_run_ids_in_the_file_name():
    assert html_file_name(compare_summaries(summary("", case("k", [1.0])), summary("...", case("k", [1.0])))) == \
        "compare-run-_.html"
    long = compare_summaries(summary("x" * 500, case("k", [1.0])), summary("y", case("k", [1.0])))
    assert html_file_name(long) == f"compare-{'x' * 80}-y.html"


def save(tmp_path, name, s):
    d = tmp_path / name
    d.mkdir()
    s.save(d / "summary.json")
    return d


def test_cli_writes_the_page_into_run_b_or_out(tmp_path, run_cli):
    a = save(tmp_path, "a", summary("ra", case("k", [1.0])))
    b = save(tmp_path, "b", summary("rb", case("k", [1.08])))
    rc, out, err = run_cli("compare", a, b / "summary.json", cwd=tmp_path)
    assert rc == 0, out + err
    page = b / "compare-ra-rb.html"
    assert out.splitlines()[-1] == f"comparison page: {page}" and page.is_file()
    assert "insufficient evidence" in page.read_text()
    out_dir = tmp_path / "pages" / "here"
    rc, out, err = run_cli("compare", a, b, "--out", out_dir, cwd=tmp_path)
    assert rc == 0 and (out_dir / "compare-ra-rb.html").is_file(), out + err


def test_cli_unwritable_page_keeps_the_text_form(tmp_path, run_cli):
    """The page cannot be written (a directory stands at its path: unwritable for root too): the text form stands
    alone, exit 0, and a note says why."""
    a = save(tmp_path, "a", summary("ra", case("k", [1.0])))
    b = save(tmp_path, "b", summary("rb", case("k", [1.0])))
    (b / "compare-ra-rb.html").mkdir()
    rc, out, err = run_cli("compare", a, b, cwd=tmp_path)
    assert rc == 0, out + err
    assert f"comparison page not written: {b / 'compare-ra-rb.html'}: " in out
    assert "REGRESSION" not in out
