"""Fuzzing the Python config reader (flagperf/pyconfig.py) in process.

Two kinds of seeded input go through it:

- generated programs: random assignments (plain, ``+=``, annotated) built from literals, names assigned above or
  not, f-strings, ``+``, ``os.path.join``, lists, tuples, dicts, unary minus, nesting (now and then past what
  Python's parser can take), growth chains that double (or multiply by ten) a value through each of those,
  statements that use one name a thousand times, and forms the reader refuses (calls, imports, comprehensions,
  ...); read with ``load_python_file``;
- mutations of valid FlagPerf-style ``test_conf.py`` and ``cluster_conf.py`` files (byte flips, truncation,
  duplicated and dropped lines, hostile lines inserted, values swapped for generated expressions); read with
  ``load_config``, as ``flagperf run --config test_conf.py`` does.

Every outcome must be a mapping within the reader's bounds (string length, characters and values in all, nesting)
or one-line problems naming the file, and never an exception; the reader's last guard (``cannot read this
statement``) must never be what answers; nothing in any program may run (the refused calls would create a marker
file). A failing input is written to a temporary folder named in the failure.
"""
from __future__ import annotations

import random
import shutil
import tempfile
import time
from pathlib import Path

from flagperf.config import SOURCE_ROOT, Config, load_config
from flagperf.errors import ConfigError
from flagperf.pyconfig import MAX_CHARS, MAX_NODES, MAX_STRING_CHARS, load_python_file
from flagperf.yamlio import MAX_DEPTH, MAX_INT, MAX_MESSAGE, LineMap
from tests.unit.mutations import dup_or_drop_line, flip_or_truncate

SEED = 20261126
PROGRAMS = 2000         # generated programs, through load_python_file
MUTANTS = 1000          # mutations of FlagPerf-style configs, through load_config
LAST_GUARD = "cannot read this statement"

BASE_TEST = b'''"""Test config in FlagPerf's format."""
import os
# -*-coding:utf-8 -*-

root = "data"
_log = "result"
VENDOR = "cpu"
RUNTIME = "bare"
FLAGPERF_LOG_PATH = os.path.join(_log, "")
FLAGPERF_LOG_LEVEL = 'info'
SHM_SIZE = "32G"
CLEAR_CACHES = False
PIP_SOURCE = ""
MONITOR_INTERVAL = 0.5
CASE_TIMEOUT = 600 + 0
ACCE_CONTAINER_OPT = " --ipc=host" + " --shm-size 8G"
ACCE_VISIBLE_DEVICE_ENV_NAME = None
HOSTS = ["localhost"]
MASTER_PORT = "29501"
SSH_PORT: str = "22"
CASES = {
    # "bert:pytorch_1.8:A100:1:8:1": "/raid/dataset/bert/train/",
    "gemm:pytorch:local:1:1:1": root,
    f"gemm:pytorch:local:1:{1}:2": os.path.join(root, ""),
    "gemm:pytorch_2.0:local:1:1:1": None,
}
'''
BASE_CLUSTER = b"""'''Cluster configs'''

# Hosts to run the benchmark. Each item is an IP address or a hostname.
HOSTS = ["10.1.2.2", "10.1.2.3", "10.1.2.4"]
HOSTS_PORTS = ["2222"]
MASTER_PORT = "29501"
SSH_PORT = "22"
"""

TARGETS = ["A", "B", "S", "ROOT", "VENDOR", "CASES", "HOSTS", "a", "b", "_c", "root"]
STRINGS = ["''", "'a'", "'/data'", "'x/'", '"gemm:pytorch:local:1:1:1"', "'{'", "'}}'", "'\\x00'", "'\\ud800'",
           "'\\n'", "'\\x1b[2J'", "'\\u00e9'", "'\\U0001F600'", "r'\\d'", "'''tri\nple'''", "b'x'", "'a' 'b'",
           "'" + "y" * 300 + "'", '"\\\\"', "'\\N{BULLET}'", "'\\u202e'"]
CLEAN_STRINGS = ["''", "'a'", "'/data'", "'x/'", '"gemm:pytorch:local:1:1:1"', "'\\u00e9'", "'''tri\nple'''"]
NUMBERS = ["0", "1", "-1", "8", "0.5", "1e999", "-1e999", "1e-320", "9223372036854775807", "9223372036854775808",
           "0x" + "f" * 40, "1_000", "0o7", "1j", "True", "False", "None", "..."]
REFUSED = ["open({m!r}, 'w')", "__import__('pathlib').Path({m!r}).touch()", "X[0]", "{{1, 2}}", "[i for i in []]",
           "lambda: open({m!r}, 'w')", "a if b else c", "1 * 2", "not 1", "1 < 2", "os.sep", "os.path.join(*a)",
           "os.path.join(a=1)", "(y := 1)", "f'{{1!r}}'", "f'{{1:>5}}'", "exec('open({m!r}, \"w\")')"]
STATEMENTS = ["import os", "import os.path", "import sys", "from os import path", "'''doc'''", "# comment", "",
              "A, B = 1, 2", "if True:\n    A = 1", "def f():\n    pass", "del A", "X.y = 1", "pass",
              "for i in []:\n    pass", "A = B = 1", "with open({m!r}, 'w'):\n    pass"]
# Growth chains: each statement doubles the last one's value (S0 is the seed).
CHAINS = ["f'{{{p}}}{{{p}}}'", "os.path.join({p}, {p})", "{p} + {p}", "[{p}, {p}]", "{{'a': {p}, 'b': {p}}}",
          "[{p}]", "{{'k': {p}}}", "f'{{{p}}}' f'{{{p}}}'", "({p}, {p})", "f'" + "{{{p}}}" * 10 + "'",
          "os.path.join(" + "{p}, " * 9 + "{p})", "[" + "{p}, " * 10 + "]", "{p} + " * 9 + "{p}"]
# Statements that use one name many times over (a value of a growth chain, say).
MANY = ["f'" + "{{{p}}}" * 1000 + "'", "os.path.join(" + "{p}, " * 1000 + "'a')", "[" + "{p}, " * 5000 + "]",
        " ".join(["f'{{{p}}}'"] * 1000), "{p} + " * 300 + "{p}",
        "{{" + ", ".join(f"{i}: {{p}}" for i in range(1000)) + "}}"]
SEEDS = ["'xxxxxxxxxxxxxxxx'", "['x', 'y']", "{'a': 'b'}", "''", "'\\u00e9\\U0001F600'"]
HOSTILE_LINES = [
    "CASES = {{**x}}", "X = open({m!r}, 'w')", "import subprocess", "VENDOR = " + "-" * 3000 + "1",
    "VENDOR = " + "[" * 150 + "]" * 150, "VENDOR = " + "(" * 300 + ")" * 300, "VENDOR = 'a\\x00'",
    "root = f'{{root}}{{root}}'", "root = os.path.join(root, root)", "root += root", "HOSTS = HOSTS + HOSTS",
    "HOSTS += [HOSTS]", "CASES = {{CASES: 1}}", "CASES = {{HOSTS: 1}}", "MASTER_PORT = 0x" + "f" * 5000,
    "CASE_TIMEOUT = 1e999", "MONITOR_INTERVAL = -1e999 + 1e999", "VENDOR = f'{{VENDOR!r}}'", "VENDOR = VENDOR[0]",
    "SHM_SIZE = '\\x1b]52;c;aGk=\\x07'", "FLAGPERF_LOG_PATH = '/dev/zero'", "CLUSTER = '/dev/zero'",
    "CASES = {{'gemm:pytorch:local:1:1:1': '" + "d" * 5000 + "'}}", "HOSTS = [" + "'h', " * 3000 + "]",
]
# The test config that goes with a mutated cluster config: BASE_TEST without its cluster keys.
TEST_OF_CLUSTER = b"\n".join(line for line in BASE_TEST.split(b"\n")
                              if not line.startswith((b"HOSTS", b"MASTER_PORT", b"SSH_PORT")))
PY_BYTES = b"()[]{}'\"+,:=#\n\\ f.-_0123456789ABCSaos\t\xff\x00"


class Gen:
    """Random config programs as Python source text."""

    def __init__(self, rng: random.Random, marker: str):
        self.rng = rng
        self.marker = marker
        self.names: list = []
        self.clean = False      # only forms the reader accepts and names assigned above (types may still clash)

    def name(self) -> str:
        if self.names and (self.clean or self.rng.random() < 0.9):
            return self.rng.choice(self.names)
        return self.rng.choice(["1", "'n'"] if self.clean else TARGETS + ["os", "__builtins__", "Z"])

    def leaf(self) -> str:
        r = self.rng.random()
        if r < 0.4:
            return self.name()
        if r < 0.75:
            return self.rng.choice(CLEAN_STRINGS if self.clean else STRINGS)
        return self.rng.choice(NUMBERS[:9] if self.clean else NUMBERS)

    def expr(self, depth: int = 0) -> str:
        rng = self.rng
        if depth >= rng.randint(1, 6) or rng.random() < 0.25:
            return self.leaf()
        r = rng.random() * (0.85 if self.clean else 1)
        sub = lambda: self.expr(depth + 1)      # noqa: E731
        if r < 0.15:
            items = ", ".join(sub() for _ in range(rng.randint(0, 4)))
            return f"[{items}]" if rng.random() < 0.7 else f"({items}{',' if items else ''})"
        if r < 0.27:
            return "{" + ", ".join(f"{sub()}: {sub()}" for _ in range(rng.randint(0, 3))) + "}"
        if r < 0.42:
            pieces = []
            for _ in range(rng.randint(0, 4)):
                if rng.random() < 0.4:
                    pieces.append(rng.choice(["a", "/", "-", "{{", "}}", " "] if self.clean else
                                             ["a", "/", "-", "{{", "}}", "\\x00", "\\ud800", "\\n", " "]))
                elif self.clean:
                    pieces.append("{" + rng.choice([self.name(), rng.choice(NUMBERS[:6]), '"s"']) + "}")
                else:
                    inner = rng.choice([self.name(), self.name(), rng.choice(NUMBERS[:9]), '"s"', "[1]", "1 + 1"])
                    pieces.append("{" + inner + rng.choice(["", "", "", "!r", "!s", ":>5", "="]) + "}")
            return "f'" + "".join(pieces) + "'"
        if r < 0.57:
            return f"{sub()} + {sub()}"
        if r < 0.7:
            return "os.path.join(" + ", ".join(sub() for _ in range(rng.randint(1 if self.clean else 0, 4))) + ")"
        if r < 0.77:
            return "-" + sub()
        if r < 0.85:
            return f"({sub()})"
        if r < 0.9:
            n = rng.choice([70, 150, 199, 300, 1000, 3000])
            return rng.choice(["-" * n + "1", "[" * n + "]" * n, "+".join([self.leaf()] * n), "not " * n + "1",
                               "(" * n + "1" + ")" * n, "{'k': " * n + "1" + "}" * n])
        return rng.choice(REFUSED).format(m=self.marker)

    def statement(self) -> str:
        rng = self.rng
        r = rng.random()
        target = rng.choice(TARGETS)
        if r < 0.55:
            line = f"{target} = {self.expr()}"
        elif r < 0.65 and (not self.clean or target in self.names):
            line = f"{target} += {self.expr()}"
        elif r < 0.7:
            line = f"{target}: {rng.choice(['int', 'str', 'open(1)'])} = {self.expr()}"
        elif self.clean:
            return rng.choice(["import os", "'''doc'''", "# comment", ""])
        else:
            return rng.choice(STATEMENTS).format(m=self.marker)
        self.names.append(target)
        return line

    def chain(self) -> str:
        step = self.rng.choice(CHAINS)
        n = self.rng.randint(15, 40)
        self.names.append(f"S{n - 1}")
        return "\n".join([f"S0 = {self.rng.choice(SEEDS)}"] +
                         [f"S{i} = " + step.format(p=f"S{i - 1}") for i in range(1, n)])

    def program(self) -> str:
        self.names = []
        self.clean = self.rng.random() < 0.3
        parts = ["import os"] if self.clean or self.rng.random() < 0.7 else []
        for _ in range(self.rng.randint(1, 12)):
            parts.append(self.chain() if self.rng.random() < 0.08 else self.statement())
            if self.names and self.rng.random() < 0.01:
                parts.append(f"{self.rng.choice(TARGETS)} = " + self.rng.choice(MANY).format(p=self.names[-1]))
        return "\n".join(parts) + ("\n" if self.rng.random() < 0.9 else "")


def mutate(rng: random.Random, gen: Gen, base: bytes) -> bytes:
    """1 to 3 random mutations of a config file's bytes."""
    data = base
    for _ in range(rng.randint(1, 3)):
        op = rng.random()
        lines = data.split(b"\n")
        if op < 0.28 and data:                                  # byte flip or truncation
            data = flip_or_truncate(rng, data, op, PY_BYTES, 0.8)
        elif op < 0.45 and lines:                               # a line duplicated or dropped
            data = dup_or_drop_line(rng, lines, 0.6)
        elif op < 0.65:                                         # a hostile line
            lines.insert(rng.randrange(len(lines) + 1), rng.choice(HOSTILE_LINES).format(m=gen.marker).encode())
            data = b"\n".join(lines)
        elif op < 0.9:                                          # a value swapped for a generated expression
            assigned = [i for i, line in enumerate(lines) if b" = " in line and not line.startswith(b" ")]
            if assigned:
                i = rng.choice(assigned)
                gen.names = [n for n in TARGETS if n.encode() in data]
                lines[i] = lines[i].split(b" = ", 1)[0] + b" = " + gen.expr().encode("utf-8", "surrogatepass")
                data = b"\n".join(lines)
        else:                                                   # a growth chain on a name the file uses
            data += b"\n" + gen.chain().replace("S0 = ", "S0 = root + ", 1).encode() + b"\nroot = S" + \
                str(rng.randint(5, 40)).encode() + b"\n"
    return data


def check_value(data: LineMap) -> None:
    """A mapping the reader may give: plain data within its bounds (counted with shared parts expanded)."""
    weights: dict = {}      # id of a list or dict -> (values, characters, nesting)

    def weigh(value) -> tuple:
        if isinstance(value, str):
            assert len(value) <= MAX_STRING_CHARS and "\x00" not in value
            value.encode("utf-8")
            return 1, len(value), 0
        if isinstance(value, bool) or value is None or isinstance(value, float):
            return 1, 0, 0
        if isinstance(value, int):
            assert abs(value) < MAX_INT
            return 1, 0, 0
        if id(value) in weights:
            return weights[id(value)]
        if isinstance(value, LineMap):
            assert all(k is None or isinstance(k, (str, int, float, bool)) for k in value), list(value)
            items = [x for pair in value.items() for x in pair]
        elif isinstance(value, list):
            items = value
        else:
            raise AssertionError(f"a {type(value).__name__} in the mapping")
        parts = [weigh(item) for item in items]
        weights[id(value)] = weight = (1 + sum(p[0] for p in parts), sum(p[1] for p in parts),
                                       1 + max((p[2] for p in parts), default=0))
        return weight

    nodes, chars, height = weigh(data)
    assert height <= MAX_DEPTH + 2, f"nested {height} deep"
    assert nodes <= MAX_NODES + len(data) + 1 and chars <= MAX_CHARS, (nodes, chars)


def check_problems(problems, roots, what: str) -> None:
    """Every problem: one printable line naming a file under one of ``roots``; never the last guard's."""
    assert isinstance(problems, list) and problems, what
    for p in problems:
        assert isinstance(p, str) and len(p.splitlines()) == 1 and p.isprintable(), f"{what}: {p!r}"
        assert len(p) <= MAX_MESSAGE + 100, f"{what}: a problem of {len(p)} characters"
        assert any(p.startswith(str(r)) for r in roots), f"{what}: does not start with a file path: {p!r}"
        assert LAST_GUARD not in p, f"{what}: the reader's last guard answered: {p}"


def read(path: Path) -> str:
    data, problems = load_python_file(path)
    assert isinstance(problems, list)
    if problems:
        check_problems(problems, [path], str(path))
    if data is None:
        assert problems, str(path)
        return "error"
    assert isinstance(data, LineMap), type(data)
    check_value(data)
    return "error" if problems else "ok"


def configure(path: Path, cluster: Path | None = None) -> str:
    try:
        cfg = load_config(path, cluster, detect=lambda: ("cpu", "fuzz"))
    except ConfigError as exc:
        check_problems(exc.problems, [path.parent, SOURCE_ROOT, "/dev/"], str(path))
        return "error"
    assert isinstance(cfg, Config)
    return "ok"


def test_base_configs_load(tmp_path):
    (tmp_path / "data").mkdir()
    (tmp_path / "test_conf.py").write_bytes(BASE_TEST)
    cfg = load_config(tmp_path / "test_conf.py", detect=lambda: ("cpu", "fuzz"))
    assert [c.key for c in cfg.test.cases] == ["gemm:pytorch:local:1:1:1", "gemm:pytorch:local:1:1:2",
                                               "gemm:pytorch_2.0:local:1:1:1"]
    (tmp_path / "cluster_conf.py").write_bytes(BASE_CLUSTER)
    assert read(tmp_path / "cluster_conf.py") == "ok"
    (tmp_path / "test_conf.py").write_bytes(TEST_OF_CLUSTER)
    cfg = load_config(tmp_path / "test_conf.py", tmp_path / "cluster_conf.py", detect=lambda: ("cpu", "fuzz"))
    assert [h.address for h in cfg.cluster.hosts] == ["10.1.2.2", "10.1.2.3", "10.1.2.4"]


def test_fuzz_python_configs(tmp_path, record_property):
    """Generated programs and mutated FlagPerf-style configs: each loads within the bounds or fails with
    one-line problems; nothing runs."""
    rng = random.Random(SEED)
    marker = tmp_path / "EXECUTED"
    gen = Gen(rng, str(marker))
    failures = Path(tempfile.mkdtemp(prefix="flagperf-pyconfig-fuzz-"))
    (tmp_path / "data").mkdir()
    conf, cluster = tmp_path / "test_conf.py", tmp_path / "cluster_conf.py"
    counts: dict = {}
    start, cpu_start = time.monotonic(), time.process_time()
    plan = [("program", PROGRAMS), ("test_conf", MUTANTS * 3 // 4), ("cluster_conf", MUTANTS // 4)]
    for kind, n in plan:
        for i in range(n):
            if kind == "cluster_conf":
                conf.write_bytes(TEST_OF_CLUSTER)
            if kind == "program":
                source = gen.program().encode("utf-8", "surrogatepass")
            else:
                source = mutate(rng, gen, BASE_TEST if kind == "test_conf" else BASE_CLUSTER)
            path = cluster if kind == "cluster_conf" else conf
            path.write_bytes(source)
            try:
                if kind == "program":
                    result = read(path)
                else:
                    result = configure(conf, cluster if kind == "cluster_conf" else None)
                    read(path)
            except BaseException as exc:
                if isinstance(exc, KeyboardInterrupt):
                    raise
                kept = failures / f"{kind}-{i}.py"
                kept.write_bytes(source)
                raise AssertionError(f"{kind} {i}: {type(exc).__name__}: {str(exc)[:2000]}; the input is in "
                                     f"{kept}") from exc
            counts[(kind, result)] = counts.get((kind, result), 0) + 1
    shutil.rmtree(failures, ignore_errors=True)
    elapsed, cpu = time.monotonic() - start, time.process_time() - cpu_start
    print(f"pyconfig fuzz: {sorted(counts.items())} in {elapsed:.1f} s ({cpu:.1f} s CPU)")
    assert not marker.exists(), "a program ran"
    for kind, n in plan:        # the fuzzer both breaks configs and leaves some whole
        assert counts.get((kind, "error"), 0) > n // 10, counts
        assert counts.get((kind, "ok"), 0) > 0, counts
    record_property("cpu_seconds", cpu)
    assert cpu < 120, f"the fuzz run took {cpu:.1f} s of CPU"     # catches a blow-up (a bomb), not speed
