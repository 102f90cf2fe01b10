#!/usr/bin/env bash
# Evidence for node verdicts on a GPU machine: run CONFIG through `flagperf run` (bare, localhost) while a bf16
# matmul loop keeps GPU NOISY busy (a planted slow GPU; -1: none), and keep the summary, the verdicts, every node's
# health.json and the terminal output. Usage: bench/verdict_evidence.sh OUT_DIR CONFIG [NOISY_GPU]
set -uo pipefail
out=${1:?usage: bench/verdict_evidence.sh OUT_DIR CONFIG [NOISY_GPU]}; conf=${2:?config}; noisy=${3:--1}
cd "$(dirname "$0")/.."
mkdir -p "$out"
nvidia-smi --query-gpu=index,name,uuid,serial,pci.bus_id,clocks.max.sm,power.limit --format=csv >"$out/gpus.csv"
pid=
if [ "$noisy" -ge 0 ]; then
  CUDA_VISIBLE_DEVICES=$noisy python3 -c '
import torch, time
a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16); b = torch.randn_like(a)
t = time.time()
while time.time() - t < 1800:
    for _ in range(50): c = a @ b
    torch.cuda.synchronize()' &
  pid=$!
  sleep 5
fi
tmp=$(mktemp -d)
sed "s#^CASES:#FLAGPERF_LOG_PATH: $tmp\nCASES:#" "$conf" >"$tmp/config.yaml"
PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH} python3 -m flagperf run --config "$tmp/config.yaml" >"$out/run_output.txt" 2>&1
code=$?
[ -n "$pid" ] && kill "$pid"
run=$(ls -d "$tmp"/run* | head -1)
cp "$run/summary.json" "$out/" 2>/dev/null
python3 - "$run" "$out" <<'PY'
import json, sys, pathlib
run, out = pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2])
s = json.loads((run / "summary.json").read_text())
(out / "verdicts.json").write_text(json.dumps(s.get("verdicts"), indent=1))
for i, h in enumerate(sorted(run.glob("*/round*/*/health.json"))[:1]):
    (out / "health.json").write_text(h.read_text())
PY
echo "flagperf exit code: $code" | tee -a "$out/run_output.txt"
rm -rf "$tmp"
exit $code
