"""Case keys ``model:framework:hw:nnodes:nproc:repeat`` (CaseSpec.parse) and case directory names."""
import pytest

from flagperf.config import CaseSpec
from flagperf.plan import case_names


@pytest.mark.parametrize("key, fields", [
    ("gemm:pytorch:local:1:2:3", ("gemm", "pytorch", "local", 1, 2, 3)),
    ("  gemm : pytorch :\tlocal: 1 :2 : 3  ", ("gemm", "pytorch", "local", 1, 2, 3)),
    ("llm:pytorch:A100_40G:2:8:5", ("llm", "pytorch", "A100_40G", 2, 8, 5)),
    ("my.model-v2+x:torch2.1:h100-sxm:16:8:1", ("my.model-v2+x", "torch2.1", "h100-sxm", 16, 8, 1)),
    ("gemm:pytorch:local:01:002:10", ("gemm", "pytorch", "local", 1, 2, 10)),
])
def test_valid_keys(key, fields):
    case = CaseSpec.parse(key)
    assert (case.model, case.framework, case.hw, case.nnodes, case.nproc, case.repeat) == fields
    assert case.key == key                      # the key is kept as written
    assert case.data_dir is None


def test_data_dir_is_kept():
    assert CaseSpec.parse("gemm:pytorch:local:1:1:1", data_dir="/data/x").data_dir == "/data/x"


@pytest.mark.parametrize("key, name", [
    ("gemm:pytorch:local:1:2:3", "gemm-pytorch-local-1x2"),
    (" gemm : pytorch : local : 1 : 2 : 3 ", "gemm-pytorch-local-1x2"),
    ("llm:pytorch:A100:2:8:1", "llm-pytorch-A100-2x8"),
])
def test_names(key, name):
    assert CaseSpec.parse(key).name == name


@pytest.mark.parametrize("key, message", [
    ("gemm:pytorch:local:1:2", "expected 6 fields 'model:framework:hw:nnodes:nproc:repeat', got 5"),
    ("gemm", "expected 6 fields 'model:framework:hw:nnodes:nproc:repeat', got 1"),
    ("", "expected 6 fields 'model:framework:hw:nnodes:nproc:repeat', got 1"),
    (":pytorch:local:1:2:3", "model is empty"),
    ("gemm: :local:1:2:3", "framework is empty"),
    ("gemm:pytorch::1:2:3", "hw is empty"),
    ("ge mm:pytorch:local:1:2:3", "model 'ge mm' may hold only letters, digits and _ . + -"),
    ("gemm:py/torch:local:1:2:3", "framework 'py/torch' may hold only letters, digits and _ . + -"),
    ("gemm:pytorch:lo$cal:1:2:3", "hw 'lo$cal' may hold only letters, digits and _ . + -"),
    ("gemm:pytorch:local:0:2:3", "nnodes must be a positive integer, each or pairs, got '0'"),
    ("gemm:pytorch:local:-1:2:3", "nnodes must be a positive integer, each or pairs, got '-1'"),
    ("gemm:pytorch:local:1.5:2:3", "nnodes must be a positive integer, each or pairs, got '1.5'"),
    ("gemm:pytorch:local:x:2:3", "nnodes must be a positive integer, each or pairs, got 'x'"),
    ("gemm:pytorch:local::2:3", "nnodes must be a positive integer, each or pairs, got ''"),
    ("gemm:pytorch:local:1:0:3", "nproc must be a positive integer or auto, got '0'"),
    ("gemm:pytorch:local:1:-1:3", "nproc must be a positive integer or auto, got '-1'"),
    ("gemm:pytorch:local:1:1.5:3", "nproc must be a positive integer or auto, got '1.5'"),
    ("gemm:pytorch:local:1:x:3", "nproc must be a positive integer or auto, got 'x'"),
    ("gemm:pytorch:local:1:2:0", "repeat must be a positive integer, got '0'"),
    ("gemm:pytorch:local:1:2:-1", "repeat must be a positive integer, got '-1'"),
    ("gemm:pytorch:local:1:2:1.5", "repeat must be a positive integer, got '1.5'"),
    ("gemm:pytorch:local:1:2:x", "repeat must be a positive integer, got 'x'"),
    ("gemm:pytorch:local:1:2:+3", "repeat must be a positive integer, got '+3'"),
    ("gemm:pytorch:local:1:2:1e3", "repeat must be a positive integer, got '1e3'"),
    ("gemm:pytorch:local:1:2:\u0663", "repeat must be a positive integer, got '\u0663'"),   # Arabic-Indic 3
])
def test_invalid_keys(key, message):
    with pytest.raises(ValueError) as exc:
        CaseSpec.parse(key)
    assert str(exc.value) == message


@pytest.mark.parametrize("key", [None, 5, 1.5, ["gemm"], {"a": 1}])
def test_non_string_keys(key):
    with pytest.raises(ValueError, match="expected a string 'model:framework:hw:nnodes:nproc:repeat'"):
        CaseSpec.parse(key)


def test_case_names_unique_when_keys_differ_only_in_repeat():
    cases = [CaseSpec.parse("gemm:pytorch:local:1:2:1"), CaseSpec.parse("gemm:pytorch:local:1:2:3"),
             CaseSpec.parse("gemm:pytorch:local:1:1:1"), CaseSpec.parse(" gemm:pytorch:local:1:2:5 ")]
    assert cases[0].name == cases[1].name
    names = case_names(cases)
    assert names == ["gemm-pytorch-local-1x2", "gemm-pytorch-local-1x2-2", "gemm-pytorch-local-1x1",
                     "gemm-pytorch-local-1x2-3"]
    assert len(set(names)) == len(names)


def test_case_names_empty():
    assert case_names([]) == []
