"""MONITOR_FORMAT in the test config: checked at load (through the real CLI), in the effective config, and passed
to the monitor's argv by the plan."""
import pytest

from flagperf.config import load_config
from flagperf.plan import build_plan

from .test_config import cli_config_error, conf, cpu_detector


@pytest.mark.parametrize("line, words", [
    ("MONITOR_FORMAT: csv", ["MONITOR_FORMAT: expected native (flagperf's monitor files) or flagperf (FlagPerf's "
                             "files too), got 'csv'"]),
    ("MONITOR_FORMAT: FlagPerf", ["MONITOR_FORMAT: expected native", "got 'FlagPerf'"]),
    ("MONITOR_FORMAT: [flagperf]", ["MONITOR_FORMAT: expected a string", "['flagperf']"]),
    ("MONITOR_FORMT: flagperf", ["MONITOR_FORMT", "MONITOR_FORMAT"]),       # an unknown key, the close one named
])
def test_bad_monitor_format_is_one_line_naming_file_line_and_key(tmp_path, write, run_cli, line, words):
    write(tmp_path, "test.yaml", conf(line))
    cli_config_error(tmp_path, run_cli, ["--config", tmp_path / "test.yaml"], [("test.yaml", 4, words)])


def test_default_native_and_flagperf_reach_the_monitor(tmp_path, write):
    (tmp_path / "cluster.yaml").write_text("HOSTS: [localhost]\nMASTER_PORT: 30301\n")
    native = load_config(write(tmp_path, "native.yaml", conf("CLUSTER: cluster.yaml")), detect=cpu_detector)
    assert native.test.monitor_format == "native" and native.to_dict()["MONITOR_FORMAT"] == "native"
    (node,) = build_plan(native, run_id="run1").cases[0].rounds[0].nodes
    assert "--format" not in node.monitor_argv

    cfg = load_config(write(tmp_path, "fp.yaml", conf("CLUSTER: cluster.yaml", "MONITOR_FORMAT: flagperf")),
                      detect=cpu_detector)
    assert cfg.test.monitor_format == "flagperf" and cfg.to_dict()["MONITOR_FORMAT"] == "flagperf"
    (node,) = build_plan(cfg, run_id="run1").cases[0].rounds[0].nodes
    assert node.monitor_argv[-2:] == ("--format", "flagperf")
    assert node.monitor_argv[1].endswith("monitors/monitor.py")
