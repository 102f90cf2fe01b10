"""Energy from monitor samples: the counter's rise inside a window, power integration without a counter, round
totals and efficiency in the summary."""
from datetime import datetime, timedelta, timezone

import pytest

from flagperf.results.monitors import energy_of, summarize_monitors, throttle_names
from flagperf.results.summary import NodeSummary, round_energy

T0 = datetime(2026, 11, 23, 12, 0, 0, tzinfo=timezone.utc)


def samples(n, **per_second):
    out = []
    for i in range(n):
        v = {"gpu": 0}
        for key, f in per_second.items():
            v[key] = f(i)
        out.append((T0 + timedelta(seconds=i), v))
    return out


def test_counter_rise_is_interpolated_inside_the_window():
    s = samples(11, energy_j=lambda i: 1000.0 + 500.0 * i, power_w=lambda i: 500.0)
    assert energy_of(s) == {"energy_j": 5000.0, "energy_source": "counter", "seconds": 10.0}
    t = T0.timestamp()
    win = energy_of(s, t + 2.5, t + 6.5)
    assert win["energy_j"] == pytest.approx(2000.0) and win["seconds"] == 4.0


def test_power_is_integrated_without_a_counter():
    s = samples(5, power_w=lambda i: 100.0 * i)       # 0, 100, ..., 400 W: trapezoids give 800 J
    e = energy_of(s)
    assert e["energy_j"] == pytest.approx(800.0) and e["energy_source"] == "integrated power samples"
    assert energy_of([]) == {}


def test_summary_devices_and_round_totals(tmp_path):
    lines = []
    for i in range(6):
        ts = (T0 + timedelta(seconds=i)).isoformat()
        for g in (0, 1):
            lines.append(f"{ts} gpu={g} power_w=600.0 sm_clock_mhz={1700 - 10 * i} energy_j={1e6 + g + 600.0 * i} "
                         f"throttle_mask={4 if i > 2 else 0}")
    (tmp_path / "nvidia_monitor.log").write_text("\n".join(lines) + "\n")
    t = T0.timestamp()
    mon = summarize_monitors(tmp_path, (t + 1.0, t + 4.0))
    d0 = mon["gpu"]["devices"][0]
    assert d0["energy_j"] == pytest.approx(3000.0) and d0["throttle_reasons"] == ["sw_power_cap"]
    assert d0["window"]["energy_j"] == pytest.approx(1800.0) and d0["window"]["power_w_mean"] == 600.0
    node = NodeSummary("h_noderank0", "h", 0, 0, [], mon)
    e = round_energy([node], {"value": 1000.0, "unit": "tokens/s"})
    assert e["round_j_total"] == pytest.approx(6000.0) and e["window_j_total"] == pytest.approx(3600.0)
    assert e["efficiency"]["value"] == pytest.approx(1000.0 * 3.0 / 3600.0) and e["efficiency"]["unit"] == "tokens/J"
    exact = round_energy([node], {"value": 1000.0, "unit": "tokens/s", "env": {"world_size": 2}, "checks": {
        "details": {"device_window": {"energy_j": 600.0, "window_s": 2.0}}}})
    assert exact["efficiency"]["value"] == pytest.approx(1000.0 * 2.0 / 1200.0)
    assert round_energy([NodeSummary("x", "x", 0)], None) is None


def test_throttle_names():
    assert throttle_names(0x4 | 0x40) == ["sw_power_cap", "hw_thermal_slowdown"] and throttle_names(0) == []
