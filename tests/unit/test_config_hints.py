"""YAML slips in a test config: one problem line each, naming the file and line, with a hint at the indentation
(a case key read outside CASES, a missing ':', a tab, a key out of column)."""

import pytest

from flagperf.checker import looks_like_case_key
from flagperf.config import load_config
from flagperf.errors import ConfigError


@pytest.mark.parametrize("key, expected", [
    ("gemm:pytorch:local:1:1:1", True),
    ("gemm:pytorch:H100:each:8:1", True),
    ("gemm:pytorch:H100:pairs:8:1:extra", True),
    ("gemm:pytorch:local:x:1:1", False),        # nnodes is no number
    ("gemm:pytorch::1:1:1", False),             # an empty field
    ("resnet50:pytorch_2.0", False),            # an inference case key, or anything shorter
    ("VENDOR", False),
    (42, False),
])
def test_looks_like_case_key(key, expected):
    assert looks_like_case_key(key) is expected


def problems(tmp_path, text, name="t.yaml"):
    path = tmp_path / name
    path.write_text(text)
    with pytest.raises(ConfigError) as err:
        load_config(path, detect=lambda: ("cpu", "test"))
    return path, err.value.problems


def test_case_keys_outside_cases_are_one_line_each_with_the_hint(tmp_path):
    path, found = problems(tmp_path, 'VENDOR: cpu\nRUNTIME: bare\nCASES:\n"gemm:pytorch:local:1:1:1": null\n'
                                     '"devmem:pytorch:local:1:1:1": null\n')
    assert found == [f"{path}:{line}: {key}: unknown key; it has the shape of a case key "
                     f"(model:framework:hw:nnodes:nproc:repeat); hint: indent it under CASES, with spaces"
                     for line, key in ((4, "gemm:pytorch:local:1:1:1"), (5, "devmem:pytorch:local:1:1:1"))]


def test_an_empty_cases_without_stray_keys_still_says_so(tmp_path):
    path, found = problems(tmp_path, "VENDOR: cpu\nRUNTIME: bare\nCASES:\n")
    assert found == [f"{path}:3: CASES: expected a non-empty mapping 'model:framework:hw:nnodes:nproc:repeat': "
                     f"data_dir"]


@pytest.mark.parametrize("text, line, hint", [
    ('VENDOR: cpu\nCASES:\n  "gemm:pytorch:local:1:1:1": null\n  "devmem:pytorch:local:1:1:1" null\n', 4,
     "hint: a key needs ': ' after it"),
    ('VENDOR: cpu\nCASES:\n    "gemm:pytorch:local:1:1:1": null\n  "devmem:pytorch:local:1:1:1": null\n', 4,
     "hint: check the indentation of that line and the one above it"),
    ('VENDOR: cpu\nCASES:\n\t"gemm:pytorch:local:1:1:1": null\n', 3, "hint: YAML indents with spaces, not tabs"),
])
def test_yaml_errors_name_file_line_and_hint(tmp_path, text, line, hint):
    path, found = problems(tmp_path, text)
    assert len(found) == 1 and found[0].startswith(f"{path}:{line}: YAML syntax error: ") and hint in found[0], found
