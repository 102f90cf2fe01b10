"""Run benchmarks/llm (or resnet50) directly, one process per variant, on one GPU; keep every PerfLog line.
Usage: python3 bench/llm_gpu.py OUT_DIR NAME='{"json": "overrides"}' ...   (vendor case config merged first)"""
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
out = Path(sys.argv[1])
out.mkdir(parents=True, exist_ok=True)
for spec in sys.argv[2:]:
    name, _, over = spec.partition("=")
    bench = "llm"
    over = json.loads(over or "{}")
    bench = over.pop("_bench", bench)
    cfg = yaml.safe_load((ROOT / "benchmarks" / bench / "case_config.yaml").read_text()) or {}
    vend = ROOT / "vendors" / "nvidia" / bench / "case_config.yaml"
    if vend.is_file():
        cfg.update(yaml.safe_load(vend.read_text()) or {})
    cfg.update(over)
    cfg["vendor_peaks"] = yaml.safe_load((ROOT / "vendors" / "nvidia" / "peaks.yaml").read_text())
    d = out / name
    d.mkdir(exist_ok=True)
    (d / "case_config.json").write_text(json.dumps(cfg))
    env = dict(os.environ, RANK="0", WORLD_SIZE="1", LOCAL_RANK="0", FLAGPERF_DEVICE="cuda",
               FLAGPERF_DIST_BACKEND="nccl", MASTER_ADDR="127.0.0.1",
               MASTER_PORT=os.environ.get("MASTER_PORT", "29611"), PYTHONUNBUFFERED="1")
    t0 = time.time()
    with open(d / "rank0.out.log", "w") as log:
        p = subprocess.run([sys.executable, "-u", str(ROOT / "benchmarks" / bench / "main.py"), "--case-config",
                            str(d / "case_config.json"), "--data-dir", str(d), "--result-dir", str(d)],
                           cwd=ROOT / "benchmarks" / bench, env=env, stdout=log, stderr=subprocess.STDOUT)
    text = (d / "rank0.out.log").read_text()
    fin = [json.loads(ln[len("[PerfLog] "):]) for ln in text.splitlines() if ln.startswith("[PerfLog] ")]
    last = fin[-1] if fin else {}
    m = {k: round(v["value"], 4) for k, v in last.get("metrics", {}).items()}
    dw = last.get("checks", {}).get("details", {}).get("device_window", {})
    print(f"== {name}: rc={p.returncode} wall={time.time() - t0:.0f}s {last.get('event')} value={last.get('value')}"
          f" {m} sm={dw.get('sm_clock_mhz_median')} W={dw.get('power_w_median')}", flush=True)
    if p.returncode:
        print(text[-2500:], flush=True)
    b = last.get("checks", {}).get("details", {}).get("baseline")
    if b:
        print("   baseline:", json.dumps(b)[:600], flush=True)
