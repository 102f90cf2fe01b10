#!/usr/bin/env bash
# Training at the frontier on one 4-GPU host: the figures of docs/results/*-training-frontier.md.
# Usage: bench/training_frontier.sh OUT_DIR PHASE [PHASE ...]     (from any folder; python3 must hold torch)
#   single   one-GPU runs side by side, one per GPU, each process alone on its GPU: GPU 0 `flagperf run` of
#            bench/configs/frontier-1b1.yaml (1b_8k on one GPU), GPUs 1-3 (CUDA_VISIBLE_DEVICES) ResNet-50
#            (bench/llm_gpu.py: the vendor case config, 30 s, no baseline) with compile_mode default,
#            reduce-overhead and max-autotune; then `flagperf run` of bench/configs/frontier-1b4.yaml (1b_8k,
#            FSDP2 on 4 GPUs)
#   8b       `flagperf run` of bench/configs/frontier-8b.yaml: 8b_8k bf16 and 8b_8k_fp8 on 4 GPUs
#   8b_bf16, 8b_sel   `flagperf run` of bench/configs/frontier-8b-bf16.yaml (8b_8k) or frontier-8b-sel.yaml
#            (8b_8k_sel: every other block recomputed), bf16 only
#   rn50_profile  bench/resnet50_profile.py on GPU 0 for each compile mode in $RN50_MODES (default: default)
#   profile  bench/llm_profile.py (torchrun, 4 ranks) for each vendor config in $PROFILE_HW (default: 8b_8k
#            8b_8k_fp8): where the step's time goes, per kernel class
#   planted  a bf16 matmul loop on GPU $PLANT_GPU (default 2), then `flagperf run` of
#            bench/configs/frontier-planted.yaml: the training payload's straggler view must name that rank
# Each flagperf run's summary.json and report.md are copied flat into OUT_DIR with its figures
# (bench/training_figures.py); nvidia-smi samples every GPU's clock, power and temperature once a second into
# OUT_DIR/<phase>-smi.csv. fp8 needs torchao importable (PYTHONPATH), else its case runs bf16 and says why.
set -uo pipefail
out=${1:?usage: bench/training_frontier.sh OUT_DIR PHASE [PHASE ...]}; shift
mkdir -p "$out"; out=$(cd "$out" && pwd)
cd "$(dirname "$0")/.."
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
export NCCL_NVLS_ENABLE=${NCCL_NVLS_ENABLE:-0}
nvidia-smi --query-gpu=index,name,uuid,serial,pci.bus_id,driver_version,power.limit,clocks.max.sm --format=csv \
  > "$out/gpus.txt" 2>&1
python3 -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'nccl', torch.cuda.nccl.version())" \
  >> "$out/gpus.txt" 2>&1
python3 -c "import torchao; print('torchao', torchao.__version__)" >> "$out/gpus.txt" 2>&1

smi() {  # smi PHASE: sample every GPU once a second until stopped; prints the sampler's pid
  nvidia-smi --query-gpu=timestamp,index,clocks.sm,clocks.mem,power.draw,temperature.gpu,utilization.gpu,memory.used \
    --format=csv,noheader -l 1 > "$out/$1-smi.csv" 2>&1 &
  echo $!
}

flagperf_run() {  # flagperf_run NAME CONFIG: one `flagperf run`, its files copied flat into OUT_DIR
  local name=$1 conf=$2 tmp gen run code
  tmp=$(mktemp -d)
  gen="bench/configs/.frontier_$name.yaml"
  { cat "$conf"; echo "FLAGPERF_LOG_PATH: $tmp"; } > "$gen"
  echo "== flagperf run $conf ($(date -u +%T))"
  python3 -m flagperf run --config "$gen" > "$out/$name-run.txt" 2>&1
  code=$?
  tail -n 25 "$out/$name-run.txt"
  run=$(ls -d "$tmp"/run* 2>/dev/null | head -1)
  if [ -n "$run" ]; then
    cp "$run/summary.json" "$out/$name-summary.json" 2>/dev/null
    cp "$run/report.md" "$out/$name-report.md" 2>/dev/null
    find "$run" -name 'rank*.out.log' -size -4M | while read -r f; do    # <case>/round<k>/<node>/rank<r>.out.log
      round=$(dirname "$(dirname "$f")")
      cp "$f" "$out/$name-$(basename "$(dirname "$round")")-$(basename "$round")-$(basename "$f")"; done
    python3 bench/training_figures.py "$out/$name-summary.json" | tee "$out/$name-figures.txt"
  fi
  rm -f "$gen"
  echo "== $name: flagperf exit code $code ($(date -u +%T))"
}

for phase in "$@"; do
  case $phase in
    single)
      pid=$(smi single)
      flagperf_run llm1b_8k_1gpu bench/configs/frontier-1b1.yaml > "$out/single-llm1b.txt" 2>&1 &   # GPU 0
      common='"time_budget_s": 30, "baseline": false, "_bench": "resnet50"'
      CUDA_VISIBLE_DEVICES=1 MASTER_PORT=29612 timeout 240 python3 bench/llm_gpu.py "$out/single" \
        rn50_default="{$common, \"compile_mode\": \"default\"}" > "$out/single-rn50-default.txt" 2>&1 &
      CUDA_VISIBLE_DEVICES=2 MASTER_PORT=29613 timeout 240 python3 bench/llm_gpu.py "$out/single" \
        rn50_reduce_overhead="{$common, \"compile_mode\": \"reduce-overhead\"}" > "$out/single-rn50-ro.txt" 2>&1 &
      CUDA_VISIBLE_DEVICES=3 MASTER_PORT=29614 timeout 240 python3 bench/llm_gpu.py "$out/single" \
        rn50_max_autotune="{$common, \"compile_mode\": \"max-autotune\"}" > "$out/single-rn50-ma.txt" 2>&1 &
      wait
      kill "$pid" 2>/dev/null
      grep -h "^== \|^   baseline" "$out"/single-rn50-*.txt
      cat "$out/llm1b_8k_1gpu-figures.txt" 2>/dev/null || tail -n 20 "$out/single-llm1b.txt"
      flagperf_run llm1b_8k_4gpu bench/configs/frontier-1b4.yaml
      ;;
    8b|8b_bf16|8b_sel)           # bench/configs/frontier-8b.yaml, frontier-8b-bf16.yaml, frontier-8b-sel.yaml
      pid=$(smi "$phase")
      flagperf_run "llm$phase" "bench/configs/frontier-${phase/_/-}.yaml"
      kill "$pid" 2>/dev/null
      ;;
    rn50_profile)
      for mode in ${RN50_MODES:-default}; do
        echo "== resnet50 profile, compile mode $mode ($(date -u +%T))"
        CUDA_VISIBLE_DEVICES=0 timeout 300 python3 bench/resnet50_profile.py --mode "$mode" 2>&1 \
          | grep -v "Warning\|warn" | tee "$out/rn50-profile-$mode.txt"
      done
      ;;
    profile)
      for hw in ${PROFILE_HW:-8b_8k 8b_8k_fp8}; do
        echo "== llm profile $hw ($(date -u +%T))"
        timeout 300 python3 -m torch.distributed.run --nproc-per-node 4 --master-port 29631 bench/llm_profile.py \
          --hw "$hw" --json "$out/profile-$hw.json" > "$out/profile-$hw.txt" 2>&1
        grep -v "Warning\|warn\|PerfLog\|USDT\|Failed to load" "$out/profile-$hw.txt" | tail -n 32
      done
      ;;
    planted)
      gpu=${PLANT_GPU:-2}
      pid=$(smi planted)
      CUDA_VISIBLE_DEVICES=$gpu timeout 240 python3 -c "
import torch, time
a = torch.randn(8192, 8192, device='cuda', dtype=torch.bfloat16); b = torch.randn_like(a)
print('neighbour: bf16 matmul loop on GPU $gpu', flush=True)
while True:
    for _ in range(50):
        a @ b
    torch.cuda.synchronize()
" > "$out/planted-neighbour.txt" 2>&1 &
      hog=$!
      sleep 5
      flagperf_run planted bench/configs/frontier-planted.yaml
      kill "$hog" "$pid" 2>/dev/null
      ;;
    *) echo "training_frontier: unknown phase '$phase' (single, 8b, 8b_bf16, 8b_sel, rn50_profile, profile, planted)" >&2; exit 2;;
  esac
done
