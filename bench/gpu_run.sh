#!/usr/bin/env bash
# Run a test config through `flagperf run` on a GPU machine (bare runtime, localhost) and keep its summary
# and the whole run directory. Usage: bench/gpu_run.sh OUT_DIR [CONFIG] [extra flagperf args]
# CONFIG defaults to configs/test_conf.yaml; the results go to a temporary FLAGPERF_LOG_PATH.
set -uo pipefail
out=${1:?usage: bench/gpu_run.sh OUT_DIR [CONFIG]}; shift
conf=${1:-configs/test_conf.yaml}; shift || true
cd "$(dirname "$0")/.."
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$out/gpus.txt"
nvidia-smi topo -m >> "$out/gpus.txt" 2>&1
python3 -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'nccl', torch.cuda.nccl.version())" | tee -a "$out/gpus.txt"
(nvcc --version | tail -2) >> "$out/gpus.txt" 2>&1
tmp=$(mktemp -d)
gen="$(dirname "$conf")/.gpu_run_$(basename "$conf")"
sed "s#^FLAGPERF_LOG_PATH:.*#FLAGPERF_LOG_PATH: $tmp#" "$conf" > "$gen"
grep -q '^FLAGPERF_LOG_PATH:' "$gen" || echo "FLAGPERF_LOG_PATH: $tmp" >> "$gen"
time python3 -m flagperf run --config "$gen" "$@" 2>&1 | tee "$out/run_output.txt"
code=${PIPESTATUS[0]}
run=$(ls -d "$tmp"/run* | head -1)
cp "$run/summary.json" "$out/summary.json"
tar -C "$tmp" -czf "$out/run.tar.gz" "$(basename "$run")"
rm -f "$gen"
echo "flagperf exit code: $code"
exit $code
