"""FlagPerf's Python config modules, read without running them (flagperf/pyconfig.py).

The reader evaluates only plain data; every other construct is a problem at its line, and nothing in the file
is ever executed or imported: the fixtures for the refused forms would each create a marker file if they ran.
"""
import os
import sys
import threading
import time
import tracemalloc
from pathlib import Path

import pytest

from flagperf.pyconfig import MAX_CHARS, MAX_NODES, MAX_PROBLEMS, MAX_STRING_CHARS, load_python_file
from flagperf.yamlio import LineMap

PREFIX = "flagperf: config error: "


def load(tmp_path, write, text, name="conf.py"):
    path = write(tmp_path, name, text)
    data, problems = load_python_file(path)
    return path, data, problems


def test_literals_names_and_line_numbers(tmp_path, write):
    path, data, problems = load(tmp_path, write, '''\
        """A docstring."""
        import os
        import os.path
        # a comment
        VENDOR = "cpu"
        COUNT = 8
        RATE = -0.5
        ON, OFF = None, None if False else None
    ''')
    # the tuple assignment on line 8 is refused; everything above it is read
    assert problems == [f"{path}:8: 'ON, OFF = (None, None if False else None)': expected NAME = value (one plain "
                        f"name); a FlagPerf Python config may hold only NAME = value assignments of literals (strings, "
                        f"numbers, True, False, None, lists, tuples, dicts), names assigned above, + of those, simple "
                        f"f-strings and os.path.join(...), and 'import os'"]
    assert isinstance(data, LineMap)
    assert dict(data) == {"VENDOR": "cpu", "COUNT": 8, "RATE": -0.5}
    assert data.lines == {"VENDOR": 5, "COUNT": 6, "RATE": 7}


def test_every_allowed_form(tmp_path, write):
    path, data, problems = load(tmp_path, write, '''\
        import os
        FLAGPERF_PATH = "/home/FlagPerf/training"
        FLAGPERF_LOG_PATH = FLAGPERF_PATH + "/result/"
        root = "/data"                       # a helper: lowercase, not a key
        _tmp = "x"                           # a helper too
        DATA = os.path.join(root, "imagenet", "train")
        NAME = f"{root}/run-{8}"
        PLAIN = f"plain"
        HOSTS = ["10.0.0.1", "10.0.0.2"] + ["10.0.0.3"]
        PAIR = ("a", 1)
        FLAGS = {"x": True, "y": False, "z": None, 3: 4.5}
        SSH_PORT = "22"
        SSH_PORT += "0"
        TOTAL = 1 + 2.5
        NEG = -(3)
        TYPED: int = 7
        CASES = {
            "gemm:pytorch_2.0:A100:1:8:1": DATA,
            "bert:pytorch_1.8:A100:1:8:1":
                "/raid/bert/",
        }
        VENDOR = "nvidia"
        VENDOR = "cpu"
    ''')
    assert problems == []
    assert dict(data) == {
        "FLAGPERF_PATH": "/home/FlagPerf/training", "FLAGPERF_LOG_PATH": "/home/FlagPerf/training/result/",
        "DATA": "/data/imagenet/train", "NAME": "/data/run-8", "PLAIN": "plain",
        "HOSTS": ["10.0.0.1", "10.0.0.2", "10.0.0.3"], "PAIR": ["a", 1],
        "FLAGS": {"x": True, "y": False, "z": None, 3: 4.5}, "SSH_PORT": "220", "TOTAL": 3.5, "NEG": -3, "TYPED": 7,
        "CASES": {"gemm:pytorch_2.0:A100:1:8:1": "/data/imagenet/train", "bert:pytorch_1.8:A100:1:8:1": "/raid/bert/"},
        "VENDOR": "cpu",
    }
    assert "root" not in data and "_tmp" not in data
    assert data.lines["VENDOR"] == 23                  # the last assignment
    assert data.lines["SSH_PORT"] == 13
    assert data["CASES"].lines == {"gemm:pytorch_2.0:A100:1:8:1": 18, "bert:pytorch_1.8:A100:1:8:1": 19}
    assert data["FLAGS"].lines == {"x": 11, "y": 11, "z": 11, 3: 11}


MARKER = "EXECUTED"
# (source, line of the problem, words in the problem): each would create tmp_path/EXECUTED if it ran.
REFUSED = [
    pytest.param("X = open({m!r}, 'w')\n", 1, ["a call 'open(", "is not allowed"], id="call"),
    pytest.param("X = os.system('touch ' + {m!r})\n", 1, ["a call 'os.system(", "is not allowed"],
                 id="call-os-system"),
    pytest.param("X = os.sep\n", 1, ["attribute access 'os.sep' is not allowed"], id="attribute"),
    pytest.param("import os\nX = os.path.join(open({m!r}, 'w').name)\n", 2, ["attribute access 'open("],
                 id="call-inside-join"),
    pytest.param("import fpmarker\n", 1, ["import fpmarker: nothing is imported from a config; only 'import os'"],
                 id="import-other"),
    pytest.param("import os as fpmarker\n", 1, ["import os as fpmarker: nothing is imported"], id="import-os-as"),
    pytest.param("from fpmarker import X\n", 1, ["from fpmarker import ...: nothing is imported"], id="import-from"),
    pytest.param("X = [open({m!r}, 'w') for _ in [1]]\n", 1, ["a comprehension", "is not allowed"],
                 id="comprehension"),
    pytest.param("X = {{k: open({m!r}, 'w') for k in [1]}}\n", 1, ["a comprehension"], id="dict-comprehension"),
    pytest.param("X = (lambda: open({m!r}, 'w'))()\n", 1, ["a call"], id="lambda-called"),
    pytest.param("X = lambda: open({m!r}, 'w')\n", 1, ["a lambda", "is not allowed"], id="lambda"),
    pytest.param("X = __import__('pathlib').Path({m!r}).touch()\n", 1, ["a call", "__import__"], id="dunder-import"),
    pytest.param("exec(\"open({m!r}, 'w')\")\n", 1, ["an expression statement 'exec("], id="exec"),
    pytest.param("X = eval(\"open({m!r}, 'w')\")\n", 1, ["a call 'eval("], id="eval"),
    pytest.param("if True:\n    X = open({m!r}, 'w')\n", 1, ["an if statement"], id="if"),
    pytest.param("def f():\n    open({m!r}, 'w')\n", 1, ["a function definition"], id="def"),
    pytest.param("class C:\n    open({m!r}, 'w')\n", 1, ["a class definition"], id="class"),
    pytest.param("for _ in [1]:\n    open({m!r}, 'w')\n", 1, ["a loop"], id="for"),
    pytest.param("with open({m!r}, 'w'):\n    pass\n", 1, ["a with statement"], id="with"),
    pytest.param("X = [1][0]\n", 1, ["subscription"], id="subscript"),
    pytest.param("X = {{1, 2}}\n", 1, ["a set"], id="set"),
    pytest.param("X = 2 * 3\n", 1, ["this operator '2 * 3'"], id="multiply"),
    pytest.param("X = 'a' if True else 'b'\n", 1, ["a conditional expression"], id="conditional"),
    pytest.param("X = (Y := 1)\n", 1, ["an assignment expression"], id="walrus"),
    pytest.param("X = {{**{{}}}}\n", 1, ["'**' unpacking"], id="dict-unpack"),
    pytest.param("X = [*[1]]\n", 1, ["'*' unpacking"], id="list-unpack"),
    pytest.param("X = b'x'\n", 1, ["a bytes literal"], id="bytes"),
    pytest.param("X = 1j\n", 1, ["a complex literal"], id="complex"),
    pytest.param("X = f'{{1!r}}'\n", 1, ["only simple f-strings"], id="fstring-conversion"),
    pytest.param("X = f'{{1:>5}}'\n", 1, ["only simple f-strings"], id="fstring-format-spec"),
    pytest.param("X = f'{{[1]}}'\n", 1, ["an f-string may hold strings and numbers, got list"], id="fstring-list"),
    pytest.param("X = 'a' + 1\n", 1, ["str + int is not allowed"], id="add-mixed"),
    pytest.param("X = -'a'\n", 1, ["unary minus/plus of str"], id="negate-string"),
    pytest.param("X = Y\n", 1, ["name 'Y' is not assigned above"], id="unassigned"),
    pytest.param("X = os.path.join('a', 1)\n", 1, ["os.path.join of str, int: expected strings"], id="join-int"),
    pytest.param("X = os.path.join(*['a'])\n", 1, ["os.path.join takes one or more strings"], id="join-star"),
    pytest.param("X = {{'a': 1, 'a': 2}}\n", 1, ["duplicate key 'a'"], id="duplicate-key"),
    pytest.param("X = 'a\\x00b'\n", 1, ["a NUL character"], id="nul-escape"),
    pytest.param("X = '\\ud800'\n", 1, ["a lone surrogate"], id="surrogate-escape"),
    pytest.param("X = 99999999999999999999\n", 1, ["integer 99999999999999999999 is too large"], id="huge-int"),
    pytest.param("X: open({m!r}, 'w')\n", 1, ["AnnAssign"], id="bare-annotation"),
    pytest.param("del X\n", 1, ["del"], id="del"),
    pytest.param("assert open({m!r}, 'w')\n", 1, ["assert"], id="assert"),
    pytest.param("X = 1\nX.y = open({m!r}, 'w')\n", 2, ["expected NAME = value"], id="attribute-target"),
]


@pytest.mark.parametrize("source, line, words", REFUSED)
def test_refused_forms_name_file_and_line_and_run_nothing(tmp_path, write, monkeypatch, source, line, words):
    marker = tmp_path / MARKER
    # A module that would create the marker if it were imported, where an import would find it.
    write(tmp_path, "fpmarker.py", f"open({str(marker)!r}, 'w').close()\nX = 1\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.chdir(tmp_path)
    path, data, problems = load(tmp_path, write, "VENDOR = 'cpu'\n" + source.format(m=str(marker)))
    assert len(problems) == 1, problems
    assert problems[0].startswith(f"{path}:{line + 1}: "), problems
    for word in words:
        assert word in problems[0], problems
    assert data["VENDOR"] == "cpu"                  # what came before is still read
    assert not marker.exists()
    assert "fpmarker" not in sys.modules


def test_a_refused_name_is_reported_once(tmp_path, write):
    path, data, problems = load(tmp_path, write, "ROOT = open('x')\nLOG = ROOT + '/log'\nOTHER = 1\n")
    assert [p.split(": ")[0] for p in problems] == [f"{path}:1"]
    assert dict(data) == {"OTHER": 1}


def test_syntax_error_names_the_line(tmp_path, write):
    path, data, problems = load(tmp_path, write, "VENDOR = 'cpu'\nCASES = {\n  'a': 1,\n  'b' 2,\n}\n")
    assert data is None
    assert len(problems) == 1 and problems[0].startswith(f"{path}:4: Python syntax error:"), problems


def test_name_reuse_bomb_is_bounded(tmp_path, write):
    lines = ["A0 = [1, 2, 3, 4, 5, 6, 7, 8, 9, 10]"] + [f"A{i} = [A{i - 1}, A{i - 1}]" for i in range(1, 40)]
    path, data, problems = load(tmp_path, write, "\n".join(lines) + "\n")
    assert len(problems) >= 1
    assert f"more than {MAX_NODES} values" in problems[0]


def test_string_doubling_is_bounded(tmp_path, write):
    lines = ["S0 = 'xxxxxxxxxxxxxxxx'"] + [f"S{i} = S{i - 1} + S{i - 1}" for i in range(1, 40)]
    path, data, problems = load(tmp_path, write, "\n".join(lines) + "\n")
    assert problems and "characters" in problems[0]
    assert max(len(v) for v in data.values()) <= 1024 * 1024


def test_deep_nesting_is_refused(tmp_path, write):
    path, data, problems = load(tmp_path, write, "X = " + "[" * 150 + "]" * 150 + "\n")
    assert len(problems) == 1 and ("nesting" in problems[0] or "syntax error" in problems[0]), problems


def test_not_utf8_and_directory(tmp_path, write):
    bad = tmp_path / "bad.py"
    bad.write_bytes(b"VENDOR = '\xff'\n")
    data, problems = load_python_file(bad)
    assert data is None and problems[0].startswith(f"{bad}: line 1: not UTF-8 text")
    (tmp_path / "dir.py").mkdir()
    data, problems = load_python_file(tmp_path / "dir.py")
    assert problems == [f"{tmp_path / 'dir.py'}: expected a Python file, found a directory"]


def test_refused_forms_through_the_cli(tmp_path, write, run_cli):
    """`flagperf run --config test_conf.py`: exit 2, one line per problem naming file:line, no traceback,
    nothing run or created."""
    marker = tmp_path / MARKER
    conf = write(tmp_path, "test_conf.py", f'''\
        import subprocess
        VENDOR = "cpu"
        RUNTIME = "bare"
        FLAGPERF_LOG_PATH = "result"
        X = __import__("os").system("touch {marker}")
        CASES = {{"gemm:pytorch:local:1:1:1": None}}
    ''')
    for extra in (["--dry-run"], []):
        rc, out, err = run_cli("run", "--config", conf, *extra, cwd=tmp_path)
        assert rc == 2, out + err
        assert out == "" and "Traceback" not in err
        first, second = err.splitlines()
        assert first == (f"{PREFIX}{conf}:1: import subprocess: nothing is imported from a config; only 'import os' "
                         f"is allowed (and ignored)")
        assert second.startswith(f"{PREFIX}{conf}:5: a call '__import__('os').system('touch ")
        assert second.endswith("' is not allowed; a FlagPerf Python config may hold only NAME = value assignments "
                               "of literals (strings, numbers, True, False, None, lists, tuples, dicts), names "
                               "assigned above, + of those, simple f-strings and os.path.join(...), and 'import os'")
    assert not marker.exists() and not (tmp_path / "result").exists()


# -- hostile input: every form ends in one-line problems, in bounded time and memory ------------------------------

def _chain(first: str, step: str, n: int = 60, head: str = "import os\n") -> str:
    """``head``, ``S0 = first`` and ``S<i> = step`` (with ``{p}`` the name before) for i = 1..n-1."""
    lines = [f"S0 = {first}"] + [f"S{i} = " + step.format(p=f"S{i - 1}") for i in range(1, n)]
    return head + "\n".join(lines) + "\n"


def _line_past(size: int, grow, cap: int = MAX_STRING_CHARS, first_line: int = 2) -> int:
    """The line of a chain (S0 on ``first_line``) whose string first passes ``cap`` characters."""
    line = first_line
    while size <= cap:
        size, line = grow(size), line + 1
    return line


S16 = "'xxxxxxxxxxxxxxxx'"
BIG = "import os\n" + "".join(f"B{i} = B{i - 1} + B{i - 1}\n" if i else f"B0 = {S16}\n" for i in range(16))
# BIG ends with B15, a string of 2**19 characters, on line 17
BOMBS = [
    pytest.param(_chain(S16, "f'{{{p}}}{{{p}}}'"), _line_past(16, lambda n: 2 * n), ["a string of 2097152 characters",
                 f"at most {MAX_STRING_CHARS}"], id="fstring-doubling"),
    pytest.param(_chain(S16, "os.path.join({p}, {p})"), _line_past(16, lambda n: 2 * n + 1),
                 ["a string of", f"at most {MAX_STRING_CHARS}"], id="join-doubling"),
    pytest.param(_chain(S16, "{p} + {p}"), _line_past(16, lambda n: 2 * n), ["a string of 2097152 characters"],
                 id="plus-doubling"),
    pytest.param(f"S = {S16}\n" + "S += S\n" * 60, _line_past(16, lambda n: 2 * n, first_line=1),
                 ["a string of 2097152 characters"], id="augmented-doubling"),
    pytest.param(_chain("['x', 'y']", "{p} + {p}"), None, [f"more than {MAX_NODES} values"], id="list-doubling"),
    pytest.param(_chain("{'a': 'x'}", "{{'a': {p}, 'b': {p}}}", n=40), None, [f"more than {MAX_NODES} values"],
                 id="dict-doubling"),
    pytest.param(BIG + "X = f'" + "{B15}" * 3000 + "'\n", 18, ["a string of 1572864 characters"],
                 id="fstring-many-references"),
    pytest.param(BIG + "X = " + " ".join(["f'{B15}'"] * 3000) + "\n", 18, ["a string of 1572864 characters"],
                 id="fstring-implicit-concatenation"),
    pytest.param(BIG + "X = os.path.join(" + "B15, " * 3000 + "'a')\n", 18,
                 [f"strings of more than {MAX_CHARS} characters in all"], id="join-many-references"),
    pytest.param(BIG + "X = [" + "B15, " * 20000 + "]\n", 18, [f"strings of more than {MAX_CHARS} characters in all"],
                 id="list-many-references"),
    pytest.param(BIG + "".join(f"X{i} = B15\n" for i in range(40)), None,
                 [f"strings of more than {MAX_CHARS} characters in all"], id="name-reused-many-times"),
    pytest.param(_chain("[]", "[{p}]", n=100, head=""), 65, ["nesting deeper than 64 levels (with 'S63' expanded)"],
                 id="nesting-by-reference"),
    pytest.param(_chain("{}", "{{'k': {p}}}", n=100, head=""), 65, ["nesting deeper than 64 levels"],
                 id="dict-nesting-by-reference"),
    pytest.param("X = " + "[" * 150 + "]" * 150 + "\n", 1, ["nesting deeper than 64 levels"], id="nesting-literal"),
    pytest.param("A = 1\n\nX = " + "-" * 100000 + "1\n", 3, ["Python syntax error: nesting too deep"],
                 id="unary-100000"),
    pytest.param("A = 1\nif A:\n    X = " + "+".join(["'a'"] * 100000) + "\n", 3,
                 ["Python syntax error: nesting too deep"], id="plus-100000"),
    pytest.param("X = " + "not " * 20000 + "1\n", 1, ["Python syntax error: nesting too deep"], id="not-20000"),
    pytest.param("X = " + "(" * 100000 + "1" + ")" * 100000 + "\n", 1, ["Python syntax error: too many nested"],
                 id="parentheses-100000"),
    pytest.param("X = " + "-" * 900 + "1\n", 1, ["nesting deeper than 64 levels"], id="unary-900"),
    pytest.param("X = " + "not " * 900 + "1\n", 1, ["this operator 'not not not", "is not allowed"], id="not-900"),
    pytest.param("X = {{}: 1}\n", 1, ["a list, tuple or dict cannot be a dict key"], id="dict-key-dict"),
    pytest.param("X = {[1]: 1}\n", 1, ["a list, tuple or dict cannot be a dict key"], id="dict-key-list"),
    pytest.param("A = 'a'\nX = f'\\x00{A}'\n", 2, ["a NUL character"], id="fstring-nul"),
    pytest.param("A = 'a'\nX = f'\\ud800{A}'\n", 2, ["a lone surrogate"], id="fstring-surrogate"),
    pytest.param("X = 0x" + "f" * 100000 + "\n", 1, ["integer 0xffff", "is too large"], id="huge-hex-int"),
    pytest.param("X = 1" + "0" * 5000 + "\n", 1, ["Python syntax error: Exceeds the limit"], id="huge-decimal-int"),
]


@pytest.mark.parametrize("source, line, words", BOMBS)
def test_bombs_and_deep_nesting_give_one_line(tmp_path, source, line, words):
    """Growth through f-strings, +, os.path.join and reused names, and nesting past any parser: one problem at
    its line, found before the value is built (memory: mostly the parsed file), never an exception."""
    path = tmp_path / "conf.py"
    path.write_text(source)
    traced = not any("nesting too deep" in word for word in words)   # Python's parser alone: traced, too slow
    if traced:
        tracemalloc.start()
    try:
        start = time.process_time()
        data, problems = load_python_file(path)
        cpu = time.process_time() - start
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert len(problems) == 1, problems
    assert problems[0].startswith(f"{path}:{line}: " if line else f"{path}:"), problems
    assert problems[0].isprintable() and len(problems[0]) <= 1100, problems
    for word in words:
        assert word in problems[0], problems
    assert peak < 64 * 2 ** 20, f"{peak} bytes allocated"      # the parsed tree of the file, mostly
    assert cpu < 30, f"{cpu:.1f} s of CPU"          # a hang or a runaway, not speed
    for value in (data or {}).values():
        assert not isinstance(value, str) or len(value) <= MAX_STRING_CHARS


def test_file_with_a_nul_byte(tmp_path):
    path = tmp_path / "conf.py"
    path.write_bytes(b"A = 1\nX = 'a\x00b'\n")
    assert load_python_file(path) == (None, [f"{path}:2: the file holds a NUL character (\\0), which a config may "
                                             f"not hold"])


NOT_REGULAR = "expected a regular Python file (not a device, pipe or socket)"


def test_files_that_are_not_regular(tmp_path):
    """A FIFO, a device and a link to one are refused without being read (a FIFO would wait for a writer,
    /dev/zero never ends); a file past the size cap is refused unread, a sparse one too."""
    fifo = tmp_path / "fifo.py"
    os.mkfifo(fifo)
    zero = tmp_path / "zero.py"
    zero.symlink_to("/dev/zero")
    for path in (fifo, zero, Path("/dev/null")):
        assert load_python_file(path) == (None, [f"{path}: {NOT_REGULAR}"])
    sparse = tmp_path / "sparse.py"
    with open(sparse, "wb") as f:
        f.truncate(2 * 2 ** 30)
    assert load_python_file(sparse) == (None, [f"{sparse}: the file has {2 * 2 ** 30} bytes; a config file may "
                                               f"have at most 1048576"])


def test_a_fifo_swapped_in_after_the_first_look_is_not_waited_on(tmp_path, monkeypatch):
    """The file is checked again once open (opened without blocking): a FIFO that replaced a regular file
    between the two is refused at once."""
    regular = tmp_path / "regular.py"
    regular.write_text("X = 1\n")
    fifo = tmp_path / "conf.py"
    os.mkfifo(fifo)
    real_stat = os.stat
    monkeypatch.setattr(os, "stat", lambda p, *a, **k: real_stat(regular) if str(p) == str(fifo) else
                        real_stat(p, *a, **k))
    result: list = []
    worker = threading.Thread(target=lambda: result.append(load_python_file(fifo)), daemon=True)
    worker.start()
    worker.join(30)
    if worker.is_alive():           # unblock the reader: it waited for a writer
        with open(fifo, "wb"):
            pass
        pytest.fail("reading the config waited on a FIFO")
    assert result == [(None, [f"{fifo}: {NOT_REGULAR}"])]


def test_problems_past_the_first_twenty_are_counted(tmp_path):
    path = tmp_path / "conf.py"
    path.write_text("A = 1\n" + "X = open()\n" * 50)
    data, problems = load_python_file(path)
    assert dict(data) == {"A": 1}
    assert len(problems) == MAX_PROBLEMS + 1
    assert problems[0].startswith(f"{path}:2: a call 'open()' is not allowed")
    assert problems[-1] == f"{path}: {50 - MAX_PROBLEMS} more problems like these, not listed"


CLI_BOMBS = [p for p in BOMBS if p.id in ("fstring-doubling", "join-doubling", "fstring-many-references",
                                          "unary-100000", "nesting-by-reference", "dict-key-dict")]


@pytest.mark.parametrize("source, line, words", CLI_BOMBS)
def test_bombs_through_the_cli(tmp_path, run_cli, source, line, words):
    """`flagperf run --config bomb.py --dry-run`: exit 2 and one line on stderr naming file:line, no traceback."""
    path = tmp_path / "test_conf.py"
    path.write_text(source)
    rc, out, err = run_cli("run", "--config", path, "--dry-run", cwd=tmp_path)
    assert rc == 2, out + err
    assert out == "" and "Traceback" not in err
    [only] = err.splitlines()
    assert only.startswith(f"{PREFIX}{path}:{line}: " if line else f"{PREFIX}{path}:"), only
    for word in words:
        assert word in only, only


def test_fifo_through_the_cli(tmp_path, run_cli):
    path = tmp_path / "test_conf.py"
    os.mkfifo(path)
    rc, out, err = run_cli("run", "--config", path, "--dry-run", cwd=tmp_path, timeout=60)
    assert (rc, out, err) == (2, "", f"{PREFIX}{path}: {NOT_REGULAR}\n")
