#!/usr/bin/env bash
# The wall time of the embedded default (configs/test_conf.yaml: `make run`, `python -m flagperf run` with no
# arguments), set-up excluded: set-up runs first, untimed; then the run is timed from start to exit.
# Usage: bench/default_wall.sh [OUT_DIR] [extra flagperf run args]
# The run directory goes to a temporary folder (or OUT_DIR/result); prints the wall time, the exit code and each
# case's status, rounds and round durations from summary.json. Target: <= 90 s on a 4-GPU H100 node.
set -uo pipefail
cd "$(dirname "$0")/.."
out=${1:-$(mktemp -d)}; shift || true
mkdir -p "$out"
py=${PYTHON:-}
[ -n "$py" ] || py=$(scripts/setup.sh) || { echo "default_wall: set-up failed" >&2; exit 1; }
if command -v nvidia-smi >/dev/null 2>&1; then
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader > "$out/gpus.txt" 2>&1 || true
  echo "gpus: $(wc -l < "$out/gpus.txt") x $(head -n 1 "$out/gpus.txt")"
else
  echo "gpus: none (nvidia-smi not found); cores: $(nproc)"
fi
start=$(date +%s.%N)
"$py" -m flagperf run --log-path "$out/result" "$@" > "$out/run_output.txt" 2>&1
code=$?
end=$(date +%s.%N)
"$py" - "$out/result" "$start" "$end" "$code" <<'PY'
import json
import pathlib
import sys

root, start, end, code = pathlib.Path(sys.argv[1]), float(sys.argv[2]), float(sys.argv[3]), sys.argv[4]
print(f"wall: {end - start:.1f} s (flagperf exit code {code}; target <= 90 s on 4x H100)")
runs = sorted(root.glob("run*/summary.json"))
if not runs:
    print(f"no summary.json under {root}: see run_output.txt")
    sys.exit(0)
summary = json.loads(runs[-1].read_text())
print(f"run: {runs[-1].parent}")
for case in summary.get("cases", []):
    rounds = case.get("rounds") or []
    took = " + ".join(f"{r.get('duration_s') or 0:.1f}" for r in rounds)
    print(f"  {case.get('name')}: {case.get('status')}, {len(rounds)} round(s): {took} s")
PY
echo "output: $out/run_output.txt"
exit $code
