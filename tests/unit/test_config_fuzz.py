"""Fuzzing the loading of configuration files (flagperf/config.py, flagperf/yamlio.py, flagperf/vendors.py).

Thousands of seeded mutations of valid test, cluster, vendor and case-config files (byte flips, truncation,
known-bad snippets such as alias bombs, bad tags, NULs, lone surrogates, odd paths, out-of-range numbers, and
type swaps) go through the loaders in process. Every outcome must be a loaded configuration, or a ConfigError
(problems, for load_vendor and load_yaml_file) whose every problem is one printable line starting with the path
of a file; nothing else may escape.

Every input that once broke loading is kept in tests/unit/fixtures/configs/ and checked on its own:
``<name>.test.yaml`` (with ``<name>.cluster.yaml`` when the test config names ``CLUSTER: cluster.yaml``).
A failing fuzz sample is written to a temporary folder named in the failure, to be added there.
"""
import os
import random
import shutil
import tempfile
import time
from pathlib import Path

import pytest

from flagperf.config import SOURCE_ROOT, Config, load_config
from flagperf.errors import ConfigError
from flagperf.vendors import load_vendor
from flagperf.yamlio import load_yaml_file
from tests.unit.mutations import dup_or_drop_line, flip_or_truncate

FIXTURES = Path(__file__).parent / "fixtures" / "configs"
SEED = 20240611
PREFIX = "flagperf: config error: "

BASE_TEST = b"""VENDOR: cpu
RUNTIME: bare
FLAGPERF_LOG_PATH: result
FLAGPERF_LOG_LEVEL: info
SHM_SIZE: 32G
CLEAR_CACHES: false
ACCE_CONTAINER_OPT: "--ipc=host -v /srv/a:/srv/a:ro --shm-size 8G"
ACCE_VISIBLE_DEVICE_ENV_NAME: null
PIP_SOURCE: ""
MONITOR_INTERVAL: 0.5
CASE_TIMEOUT: 600
DOCKER_BUILD_ARGS: {BASE_IMAGE: "x/y:1", N: 3}
CLUSTER: cluster.yaml
CASES:
  "gemm:pytorch:local:1:1:1": data
  "gemm:pytorch:local:2:auto:2": null
  gemm:pytorch:A100:1:2:3: ./data
"""
BASE_CLUSTER = b"""SCHEDULER: ssh
SSH_PORT: 22
SSH_USER: bench
KNOWN_HOSTS: known_hosts
MASTER_PORT: 29501
PYTHON: python3
HOSTS:
  - localhost
  - HOST: localhost
    SSH_PORT: 2222
    FLAGPERF_PATH: tree
"""
BASE_VENDOR = (SOURCE_ROOT / "vendors" / "nvidia" / "vendor.yaml").read_bytes().replace(
    b"\ncontainer:\n", b"\ncontainer:\n  devices: [/dev/infiniband]\n  volumes: ['/a:/b:ro']\n  shm_size: 16G\n"
                       b"  group_add: [video, 44]\n")
BASE_CASE = (SOURCE_ROOT / "benchmarks" / "gemm" / "case_config.yaml").read_bytes()

BOMB = b"".join(b"%s: &%s [%s]\n" % (bytes([97 + i]), bytes([97 + i]),
                                      b",".join([b"*%s" % bytes([96 + i]) if i else b'"lol"'] * 9))
                for i in range(9))

# Values that a key may be given instead of its proper one.
BAD_VALUES = [
    b'!!int "x"', b"!!timestamp x", b"!!bool maybe", b'!!binary "@@@"', b"!!float nope", b"!!int ''",
    b"!!python/object:os.system x", b"!!python/name:os.system ''", b'!!python/object/apply:os.system ["true"]',
    b'"\\ud800"', b'"a\\udfffb"', b'"a\\0b"', b'"a\\x00b"', b"~nosuchuser/x", b"~nosuchuser", b"loop/x", b"loop",
    b'"' + b"a" * 5000 + b'"', b'"/' + b"b/" * 2100 + b'"', b".inf", b"-.inf", b".nan", b"1e10", b"1e-320",
    b"1e-6", b"0x" + b"f" * 40, b"9" * 30, b"-" + b"9" * 19, b"1:2:3:4:5:6:7:8:9:10:11:12:13:14:15", b"[]", b"{}",
    b"null", b"true", b'""', b"''", b'"/a:/b"', b'"data:x"', b"-1", b"0", b"1.5", b"65536", b"[1, [2, [3]]]",
    b"{a: 1}", b"*undefined", b"&r [*r]", b"!!set {a, b}", b"!!omap [a: 1]", b"2001-12-14", b"2001-12-14t21:59:43Z",
    b'"x\\ny"', b'"x\\u2028y"', b'"\\x85"', b"|\n  multi\n  line", b">-\n  folded", b"!custom x", b"!!str", b"&a x",
    b"*a", b"<<", b"? a", b"- a", b"'unterminated", b'"unterminated', b"[unclosed", b"{unclosed", b"@reserved",
    b"`reserved", b"%TAG", b"a: b: c", b"!!binary AAAA", b"0o777777777777777777777777777", b"1000000", b"1025",
    b"10001", b"1001", b"1e400", b"-0.0", b"0.049", b"3601", b"2592001", b"0.1", b"17T", b"0", b"1b", b"512",
    b"99999999999999999999999T",
]
# Whole lines to insert.
BAD_LINES = [
    b'"gemm:pytorch:local:99999:1:1": null', b'"gemm:pytorch:local:1:2000:1": null',
    b'"gemm:pytorch:local:1:1:5000": null', b'"gemm:pytorch:local:1:1:' + b"9" * 5000 + b'": null',
    b'"gemm:pytorch:local:1:1:1": "a:b"', b'"gemm:pytorch:local:3:1:1": null', b"1: 2", b"null: 1", b"~: x",
    b"true: 1", b"1.5: x", b"[a, b]: 1", b"? [a]\n: 1", b"? {a: 1}\n: 1", b"<<: {a: 1}", b"<<: *x", b"<<: [1, 2]",
    b"&x a: 1", b"a: " + b"[" * 100 + b"]" * 100, b"a: " + b"{b: " * 70 + b"}" * 70, b"--- x", b"...", b"---",
    b"%YAML 1.1", b"%YAML 9.9", b"%TAG ! tag:x,2000:", b"CASES: !!python/object/apply:os.system [true]",
    b"VENDOR: [cpu]", b"HOSTS: [{HOST: [a]}]", b"HOSTS: [[localhost]]", b"HOSTS: [null, 1, true]",
    b"HOSTS: [{HOST: localhost, SSH_PORT: 0}]", b"HOSTS: [{HOST: localhost, FLAGPERF_PATH: ''}]",
    b"HOSTS: [{HOST: " + b"a" * 300 + b"}]", b"CASES: {" + b", ".join(b'"g%d:pytorch:x:1:1:1": null' % i
                                                                for i in range(50)) + b"}",
    b"  - " + b"x" * 100, b"  " + b"a" * 100 + b": 1", b"\t- x", b"a:\tb", b"CLUSTER: ''", b"CLUSTER: loop",
    b"CLUSTER: /dev/zero", b"CLUSTER: .", b"CLUSTER: ~nosuchuser/c.yaml", b"EXTRA_CA_BUNDLE: loop/x",
    b"FLAGPERF_PATH: ''", b"FLAGPERF_LOG_PATH: ''", b"FLAGPERF_LOG_PATH: [a]", b"SSH_KEY: " + b"k" * 300,
    b"KNOWN_HOSTS: ~nosuchuser/kh", b"SHM_SIZE: 0", b"SHM_SIZE: 1", b"SHM_SIZE: 17T", b"ACCE_CONTAINER_OPT: '-v'",
    b"ACCE_CONTAINER_OPT: '--ulimit nofile=" + b"9" * 5000 + b"'", b"ACCE_CONTAINER_OPT: \"'\"",
    b"ACCE_CONTAINER_OPT: '--shm-size 0 --gpus count=99999999999999999999'", b"DOCKER_BUILD_ARGS: {1: 2}",
    b"DOCKER_BUILD_ARGS: {A: [1]}", b"rank_env: {1: 2, A: [b]}", b"container: {gpus: [1]}",
    b"container: {ulimits: {nofile: '1:" + b"9" * 40 + b"'}}", b"container: {shm_size: 1e400}", b"peaks: ''",
    b"peaks: loop/x", b"peaks: " + b"p" * 300, b"frameworks: [[]]", b"frameworks: {}", b"container: []",
    b"\xef\xbb\xbfa: 1", b"a: \xff", b"a: \xed\xa0\x80", b"a: \x00", b"a: \x07", b"a: \x85", b"a: \xe2\x80\xa8",
]
# Whole documents that replace a file now and then.
BAD_DOCS = [BOMB, b"a: &a [*a]\n", b"a: &a {b: *a}\n", b"[" * 200 + b"]" * 200, b"- " * 70 + b"x", b"",
            b"\x00", b"~", b"[]", b"42", b"'x'", b"--- a\n--- b\n", b"!!python/object:os.system x",
            b"a: 1\na: 2\n", b"\xff\xfe\x00a", b"\xef\xbb\xbf"]
STRUCTURAL = b":-[]{}&*!|>'\"%@`#,?\n\t \x00\xff\\~0123456789."


def mutate(rng: random.Random, base: bytes) -> bytes:
    """1 to 3 random mutations of ``base``."""
    data = base
    if rng.random() < 0.02:
        return rng.choice(BAD_DOCS)
    for _ in range(rng.randint(1, 3)):
        op = rng.random()
        lines = data.split(b"\n")
        if op < 0.28 and data:                                  # byte flip or truncation
            data = flip_or_truncate(rng, data, op, STRUCTURAL, 0.7)
        elif op < 0.5:                                          # a known-bad line
            i = rng.randrange(len(lines) + 1)
            indent = rng.choice([b"", b"", b"  ", b"    "])
            lines.insert(i, indent + rng.choice(BAD_LINES))
            data = b"\n".join(lines)
        elif op < 0.85:                                         # a key's value swapped for a bad one
            keyed = [i for i, line in enumerate(lines) if b": " in line or line.rstrip().endswith(b":")]
            if keyed:
                i = rng.choice(keyed)
                head = lines[i].split(b": ", 1)[0] if b": " in lines[i] else lines[i].rstrip()[:-1]
                lines[i] = head + b": " + rng.choice(BAD_VALUES)
                data = b"\n".join(lines)
        elif op < 0.92 and lines:                               # a line duplicated or dropped
            data = dup_or_drop_line(rng, lines, 0.5)
        else:                                                   # random bytes
            i = rng.randrange(len(data) + 1)
            data = data[:i] + bytes(rng.choice(STRUCTURAL) for _ in range(rng.randint(1, 8))) + data[i:]
    return data


def check_problems(problems, roots, what):
    """Every problem: one printable line starting with the path of a file under one of ``roots``."""
    assert problems, what
    for p in problems:
        assert isinstance(p, str), what
        assert len(p.splitlines()) == 1 and p.isprintable(), f"{what}: not one printable line: {p!r}"
        p.encode("utf-8")
        assert any(p.startswith(str(r)) for r in roots), f"{what}: does not start with a file path: {p!r}"


def setup_tree(tmp: Path) -> Path:
    """The folder next to the configs: a data directory, a host tree, a symlink loop."""
    (tmp / "data").mkdir(parents=True, exist_ok=True)
    (tmp / "tree").mkdir(exist_ok=True)
    if not os.path.lexists(tmp / "loop"):
        os.symlink("loop", tmp / "loop")
    if not (tmp / "cluster.yaml").exists():
        (tmp / "cluster.yaml").write_bytes(BASE_CLUSTER)
    return tmp


def load(test_path: Path):
    return load_config(test_path, detect=lambda: ("cpu", "fuzz"))


def outcome(test_path: Path, roots) -> str:
    try:
        cfg = load(test_path)
    except ConfigError as exc:
        check_problems(exc.problems, roots, str(test_path))
        return "error"
    assert isinstance(cfg, Config)
    return "ok"


def keep(failures: Path, name: str, files: dict) -> Path:
    failures.mkdir(parents=True, exist_ok=True)
    for suffix, data in files.items():
        (failures / f"{name}.{suffix}").write_bytes(data)
    return failures


def test_base_configs_load(tmp_path):
    setup_tree(tmp_path)
    (tmp_path / "test.yaml").write_bytes(BASE_TEST)
    (tmp_path / "cluster.yaml").write_bytes(BASE_CLUSTER)
    cfg = load(tmp_path / "test.yaml")
    assert [c.key for c in cfg.test.cases][0] == "gemm:pytorch:local:1:1:1"
    (tmp_path / "vendors" / "nvidia").mkdir(parents=True)
    (tmp_path / "vendors" / "nvidia" / "vendor.yaml").write_bytes(BASE_VENDOR)
    (tmp_path / "vendors" / "nvidia" / "peaks.yaml").write_text("{}\n")
    (tmp_path / "monitors" / "accel").mkdir(parents=True)
    (tmp_path / "monitors" / "accel" / "nvml.py").write_text("")
    profile, problems = load_vendor(tmp_path, "nvidia")
    assert problems == [] and profile is not None


def test_fuzz_config_loading(tmp_path, record_property):
    """Seeded mutations of every kind of config file; each must load or fail with one-line problems."""
    rng = random.Random(SEED)
    failures = Path(tempfile.mkdtemp(prefix="flagperf-fuzz-failures-"))
    counts: dict = {}
    start, cpu_start = time.monotonic(), time.process_time()
    tree = setup_tree(tmp_path / "t")
    (tree / "vendors" / "nvidia").mkdir(parents=True)
    (tree / "vendors" / "nvidia" / "peaks.yaml").write_text("{}\n")
    (tree / "monitors" / "accel").mkdir(parents=True)
    (tree / "monitors" / "accel" / "nvml.py").write_text("")
    test, cluster = tree / "test.yaml", tree / "cluster.yaml"
    vendor, case = tree / "vendors" / "nvidia" / "vendor.yaml", tree / "case_config.yaml"
    plan = [("test", 2400), ("cluster", 1200), ("vendor", 700), ("case", 700)]
    for kind, n in plan:
        for i in range(n):
            files = {"test.yaml": BASE_TEST, "cluster.yaml": BASE_CLUSTER}
            if kind in ("test", "cluster"):
                files[f"{kind}.yaml"] = mutate(rng, files[f"{kind}.yaml"])
            try:
                if kind in ("test", "cluster"):
                    test.write_bytes(files["test.yaml"])
                    cluster.write_bytes(files["cluster.yaml"])
                    result = outcome(test, [tree, SOURCE_ROOT, "/dev/"])
                elif kind == "vendor":
                    files = {"vendor.yaml": mutate(rng, BASE_VENDOR)}
                    vendor.write_bytes(files["vendor.yaml"])
                    profile, problems = load_vendor(tree, "nvidia")
                    result = "ok" if profile is not None else "error"
                    if problems or profile is None:
                        check_problems(problems, [vendor], str(vendor))
                else:
                    files = {"case_config.yaml": mutate(rng, BASE_CASE)}
                    case.write_bytes(files["case_config.yaml"])
                    data, problems = load_yaml_file(case)
                    result = "error" if problems else "ok"
                    if problems:
                        check_problems(problems, [case], str(case))
            except BaseException as exc:
                if isinstance(exc, KeyboardInterrupt):
                    raise
                name = f"{kind}-{i}"
                keep(failures, name, files)
                raise AssertionError(f"{kind} mutation {i}: {type(exc).__name__}: {exc}; the input is in "
                                     f"{failures}/{name}.*: add it to {FIXTURES}") from exc
            counts[(kind, result)] = counts.get((kind, result), 0) + 1
    shutil.rmtree(failures, ignore_errors=True)
    elapsed, cpu = time.monotonic() - start, time.process_time() - cpu_start
    print(f"fuzz: {sorted(counts.items())} in {elapsed:.1f} s ({cpu:.1f} s CPU)")
    for kind, n in plan:        # the fuzzer both breaks configs and leaves some intact
        assert counts.get((kind, "error"), 0) > n // 10, counts
        assert counts.get((kind, "ok"), 0) > 0, counts
    record_property("cpu_seconds", cpu)         # bench/bounds.py prints it
    assert cpu < 120, f"the fuzz run took {cpu:.1f} s of CPU"     # catches a blow-up (an alias bomb), not speed


def fixture_names(kind="test"):
    return sorted(p.name[:-len(f".{kind}.yaml")] for p in FIXTURES.glob(f"*.{kind}.yaml"))


def place_fixture(name: str, tmp: Path) -> Path:
    setup_tree(tmp)
    test = tmp / "test.yaml"
    test.write_bytes((FIXTURES / f"{name}.test.yaml").read_bytes())
    cluster = FIXTURES / f"{name}.cluster.yaml"
    (tmp / "cluster.yaml").write_bytes(cluster.read_bytes() if cluster.exists() else BASE_CLUSTER)
    return test


@pytest.mark.parametrize("name", fixture_names())
def test_fixture_is_a_config_error(tmp_path, name):
    """Each input that once broke loading is now a ConfigError: one line per problem, naming the file."""
    test = place_fixture(name, tmp_path)
    with pytest.raises(ConfigError) as info:
        load(test)
    check_problems(info.value.problems, [tmp_path.resolve(), SOURCE_ROOT, "/dev/"], name)


@pytest.mark.parametrize("name", fixture_names("vendor"))
def test_vendor_fixture_is_refused(tmp_path, name):
    """vendor.yaml inputs that once broke load_vendor: problems, one line each, naming the file."""
    path = tmp_path / "vendors" / "nvidia" / "vendor.yaml"
    path.parent.mkdir(parents=True)
    setup_tree(tmp_path)
    path.write_bytes((FIXTURES / f"{name}.vendor.yaml").read_bytes())
    profile, problems = load_vendor(tmp_path, "nvidia")
    assert profile is None
    check_problems(problems, [path], name)


@pytest.mark.parametrize("name", fixture_names("case"))
def test_case_config_fixture_is_refused(tmp_path, name):
    """Case-config (override) YAML that once broke loading: a problem naming the file and line."""
    path = tmp_path / "case_config.yaml"
    path.write_bytes((FIXTURES / f"{name}.case.yaml").read_bytes())
    data, problems = load_yaml_file(path)
    assert data is None
    check_problems(problems, [f"{path}:"], name)


def test_file_too_large(tmp_path):
    test = setup_tree(tmp_path) / "test.yaml"
    test.write_bytes(BASE_TEST + b"#" * (1024 * 1024))
    with pytest.raises(ConfigError) as info:
        load(test)
    assert info.value.problems == [f"{test}: the file has {test.stat().st_size} bytes; a config file may have "
                                   f"at most 1048576"]


def test_cluster_is_a_fifo(tmp_path):
    """A named pipe as a config file is refused, not opened (opening it would wait for a writer)."""
    test = setup_tree(tmp_path) / "test.yaml"
    os.mkfifo(tmp_path / "fifo.yaml")
    test.write_bytes(BASE_TEST.replace(b"CLUSTER: cluster.yaml", b"CLUSTER: fifo.yaml"))
    with pytest.raises(ConfigError) as info:
        load(test)
    assert info.value.problems == [f"{tmp_path / 'fifo.yaml'}: expected a regular YAML file (not a device, pipe "
                                   f"or socket)"]


@pytest.mark.parametrize("value, words", [
    (b'!!int "x"', ["test.yaml:10: YAML syntax error: cannot read 'x' as int"]),
    (b"!!timestamp x", ["test.yaml:10: YAML syntax error: cannot read 'x' as timestamp"]),
    (b"!!bool maybe", ["test.yaml:10: YAML syntax error: cannot read 'maybe' as bool"]),
    (b'!!binary "@@@"', ["test.yaml:10: MONITOR_INTERVAL: expected a number", "bytes b''"]),
    (b"!!python/object:os.system x", ["test.yaml:10: YAML syntax error: could not determine a constructor"]),
    (b'"\\ud800"', ["test.yaml:10: YAML syntax error: a string holds a lone surrogate (\\ud800)"]),
    (b"1.0e-6", ["test.yaml:10: MONITOR_INTERVAL: expected a number of seconds from 0.05 to 3600, got 1e-06"]),
    (b"1.0e-320", ["test.yaml:10: MONITOR_INTERVAL: expected a number of seconds from 0.05 to 3600, got 1e-320"]),
    (b"1e-6", ["test.yaml:10: MONITOR_INTERVAL: expected a number", "got str '1e-6'"]),    # YAML 1.1: a string
    (b"3601", ["test.yaml:10: MONITOR_INTERVAL: expected a number of seconds from 0.05 to 3600, got 3601"]),
    (b".inf", ["test.yaml:10: MONITOR_INTERVAL: expected a number of seconds from 0.05 to 3600, got inf"]),
    (b"0x" + b"f" * 40, ["test.yaml:10: YAML syntax error: integer 0xffff", "is too large"]),
])
def test_bad_values_name_file_and_line(tmp_path, value, words):
    test = setup_tree(tmp_path) / "test.yaml"
    test.write_bytes(BASE_TEST.replace(b"MONITOR_INTERVAL: 0.5", b"MONITOR_INTERVAL: " + value))
    with pytest.raises(ConfigError) as info:
        load(test)
    assert len(info.value.problems) == 1, info.value.problems
    assert info.value.problems[0].startswith(str(tmp_path)) and all(w in info.value.problems[0] for w in words), \
        info.value.problems


@pytest.mark.parametrize("case, message", [
    (b'"gemm:pytorch:local:1:1:1001": null', "repeat must be at most 1000, got '1001'"),
    (b'"gemm:pytorch:local:1:1025:1": null', "nproc must be at most 1024, got '1025'"),
    (b'"gemm:pytorch:local:10001:1:1": null', "nnodes must be at most 10000, got '10001'"),
    (b'"gemm:pytorch:local:1:1:1": "data:/x"', "the data directory may not hold ':'"),
    (b'"gemm:pytorch:local:1:1:1": loop/x', "data directory: cannot resolve 'loop/x'"),
    (b'"gemm:pytorch:local:1:1:1": ~nosuchuser/x', "data directory: cannot expand '~nosuchuser/x'"),
    (b'"gemm:pytorch:local:1:1:1": ""', "data directory: expected a non-empty path, got ''"),
])
def test_case_bounds_and_data_dirs(tmp_path, case, message):
    test = setup_tree(tmp_path) / "test.yaml"
    test.write_bytes(BASE_TEST.replace(b'"gemm:pytorch:local:1:1:1": data', case))
    with pytest.raises(ConfigError) as info:
        load(test)
    assert len(info.value.problems) == 1 and message in info.value.problems[0], info.value.problems
    assert info.value.problems[0].startswith(f"{tmp_path / 'test.yaml'}:15: CASES["), info.value.problems


CLI_FIXTURES = ["alias-bomb", "nul-byte", "lone-surrogate-escape", "tag-bad-int", "symlink-loop-path",
                "case-timeout-inf", "data-dir-colon", "nesting-deep"]


@pytest.mark.parametrize("name", CLI_FIXTURES)
def test_fixture_through_cli(tmp_path, run_cli, name):
    """The real command: exit 2, one line per problem on stderr, no traceback."""
    test = place_fixture(name, tmp_path)
    rc, out, err = run_cli("run", "--config", test, "--dry-run", cwd=tmp_path, timeout=60)
    what = f"{name}\nstdout:\n{out}\nstderr:\n{err}"
    assert rc == 2, what
    assert "Traceback" not in out + err, what
    lines = err.splitlines()
    assert lines and all(line.startswith(PREFIX + str(tmp_path.resolve())) for line in lines), what
    assert len(lines) == len(load_problems(test)), what


def load_problems(test):
    try:
        load(test)
    except ConfigError as exc:
        return exc.problems
    return []


def test_fixtures_exist():
    assert set(CLI_FIXTURES) <= set(fixture_names())
    assert len(fixture_names()) >= 20
