"""Print the training figures of flagperf runs (llm and resnet50 cases) from their summary.json files, one block per
case round: throughput, MFU in the three conventions, model TFLOP/s, the FLOPs per token, memory, precision, the
device window's clocks, power and energy, and the straggler view (slowest rank, its GPU, flagged ranks).
Usage: python3 bench/training_figures.py SUMMARY_JSON [SUMMARY_JSON ...]"""
import json
import sys


def fmt(v, spec=".4g"):
    return "-" if v is None else format(v, spec) if isinstance(v, (int, float)) else str(v)


def metric(metrics, name):
    m = metrics.get(name)
    return m.get("value") if isinstance(m, dict) else None


def window_line(dw):
    if not dw:
        return "device window: -"
    keys = ("sm_clock_mhz_median", "sm_clock_mhz_max", "mem_clock_mhz_median", "power_w_median", "power_w_max",
            "energy_j", "window_s", "samples", "throttle_reasons", "omitted")
    return "device window: " + ", ".join(f"{k}={fmt(dw.get(k))}" for k in keys if k in dw)


def straggler_line(view):
    if not view:
        return "stragglers: -"
    ranks = view.get("per_rank") or []
    slow = view.get("slowest") or {}
    probe = {r.get("rank"): (r.get("probe") or {}).get("median_s") for r in ranks}
    probes = " ".join(f"r{k}={v * 1e3:.2f}ms" for k, v in sorted(probe.items()) if isinstance(v, (int, float)))
    gpu = slow.get("gpu") or {}
    return (f"stragglers: slowest rank {slow.get('rank')} (GPU {json.dumps(gpu)}, "
            f"{fmt(slow.get('vs_median_pct'), '+.1f')}% vs the median probe), flagged {view.get('flagged')} "
            f"(margin {view.get('margin_pct')}%){' ' + view['omitted'] if view.get('omitted') else ''}; "
            f"probe {probes}")


def show(path):
    data = json.load(open(path))
    print(f"# {path}: run {data.get('run_id')} {data.get('status')} in {fmt(data.get('duration_s'), '.0f')} s")
    for case in data.get("cases", []):
        for rnd in case.get("rounds", []):
            m, d = rnd.get("metrics") or {}, (rnd.get("checks") or {}).get("details") or {}
            env = rnd.get("env") or {}
            print(f"## {case.get('key')} round {rnd.get('round')}: {rnd.get('status')}, {case.get('metric')} = "
                  f"{fmt(rnd.get('value'), '.6g')} {case.get('unit')}, e2e {fmt(rnd.get('e2e_time'), '.0f')} s"
                  f"  [{env.get('device_name')}, torch {env.get('torch')}, nccl {env.get('nccl')}]")
            if rnd.get("failure"):
                print(f"   failure: {json.dumps(rnd['failure'])[:600]}")
            if case.get("model") == "llm":
                mfu = d.get("mfu") or {}
                conv = mfu.get("conventions") or {}
                print(f"   tokens/s/GPU {fmt(metric(m, 'tokens_per_s_per_device'), '.0f')}, MFU headline "
                      f"{fmt(metric(m, 'mfu'), '.2f')}% / torchtitan {fmt(metric(m, 'mfu_titan'), '.2f')}% / "
                      f"FlagPerf 6N {fmt(metric(m, 'mfu_flagperf'), '.2f')}%, model TFLOP/s/GPU "
                      f"{fmt(metric(m, 'model_tflops_per_device'), '.1f')} (peak {fmt(mfu.get('peak_tflops'))})")
                for name, c in conv.items():
                    print(f"     {name}: {fmt(c.get('flops_per_token'), '.4e')} FLOP/token, "
                          f"{fmt(c.get('mfu_pct'), '.2f')}%  ({c.get('formula')})")
                fp8 = json.dumps(d.get("fp8") or d.get("fp8_fallback_reason"))
                print(f"   precision {d.get('precision_used')} {fp8}"
                      f"; AC {d.get('activation_checkpointing')}; parallel {d.get('parallel')}; peak mem "
                      f"{fmt(metric(m, 'peak_memory_gib'), '.1f')} GiB; step median "
                      f"{fmt(metric(m, 'step_time_median_s'))} s; steps {d.get('steps_measured')}; "
                      f"converged {d.get('converged')} (final loss {fmt(d.get('final_loss'))}, eval "
                      f"{fmt(d.get('eval_loss'))}); compile {fmt(metric(m, 'compile_s'), '.1f')} s; "
                      f"allocator {json.dumps(d.get('allocator'))}")
            elif case.get("model") == "resnet50":
                keep = ("images_per_s_per_device", "mfu", "step_time_median_s", "compile_s", "peak_memory_gib",
                        "accuracy")
                print("   " + ", ".join(f"{k}={fmt(metric(m, k))}" for k in keep if k in m)
                      + f"; compile {json.dumps(d.get('compile'))}; optimizer {json.dumps(d.get('optimizer'))}")
            else:
                print("   " + ", ".join(f"{k}={fmt(v.get('value'))}" for k, v in sorted(m.items())[:12]))
            print("   " + window_line(d.get("device_window")))
            if "stragglers" in d:
                print("   " + straggler_line(d["stragglers"]))


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    for p in sys.argv[1:]:
        show(p)
