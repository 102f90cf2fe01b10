#!/usr/bin/env bash
# Run the embedded default through `flagperf run` on a GPU machine (bare runtime, localhost) and keep the
# run directory's summary and logs. Usage: bench/gpu_local_run.sh OUT_DIR [extra flagperf args]
set -uo pipefail
out=${1:?usage: bench/gpu_local_run.sh OUT_DIR}; shift
cd "$(dirname "$0")/.."
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$out/gpus.txt"
python3 -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'nccl', torch.cuda.nccl.version())" | tee -a "$out/gpus.txt"
tmp=$(mktemp -d)
sed "s#^FLAGPERF_LOG_PATH:.*#FLAGPERF_LOG_PATH: $tmp#" configs/test_conf.yaml > configs/.gpu_conf.yaml
time python3 -m flagperf run --config configs/.gpu_conf.yaml "$@" 2>&1 | tee "$out/run_output.txt"
code=${PIPESTATUS[0]}
run=$(ls -d "$tmp"/run* | head -1)
cp "$run/summary.json" "$out/summary.json"
tar -C "$tmp" -czf "$out/run.tar.gz" "$(basename "$run")"
rm -f configs/.gpu_conf.yaml
echo "flagperf exit code: $code"
exit $code
