#!/usr/bin/env bash
# Run FlagPerf's distilbert pytorch training case by hand on a GPU machine (no network, no docker), with
# synthetic data, and keep its logs, so its throughput can be compared with the same case run by `flagperf run`.
# Usage: bench/flagperf_training_gpu.sh FLAGPERF_TREE OUT_DIR [NPROC]
#   FLAGPERF_TREE: a FlagPerf checkout, or its training/ folder (the config file is written into it)
#   NPROC: GPUs on this host (default 1); the case key is distilbert:pytorch:$HW:1:NPROC:1
# Environment: HW (default H100), TRAIN_SAMPLES (12288), EVAL_SAMPLES (1024), MAX_EPOCH (2),
#   CONFIG_SET (more case config keys, "KEY=VALUE KEY=VALUE", Python literals without spaces),
#   DATA_DIR (default: a fresh temporary folder; the data is ~0.4 GiB, kept out of OUT_DIR), PYTHON (python3).
# OUT_DIR gets: env.txt, data_gen.log, config_<HW>x1x<NPROC>.py (the case config used), hand/launcher.out,
#   hand/rank<N>.out.log, hand/start_pytorch_task.log, hand/finished.json (the FINISHED PerfLog value),
#   hand/exit_code, hand/wall_seconds.
set -uo pipefail
tree=${1:?usage: bench/flagperf_training_gpu.sh FLAGPERF_TREE OUT_DIR [NPROC]}
out=${2:?usage: bench/flagperf_training_gpu.sh FLAGPERF_TREE OUT_DIR [NPROC]}
nproc=${3:-1}
HW=${HW:-H100}
TRAIN_SAMPLES=${TRAIN_SAMPLES:-12288}
EVAL_SAMPLES=${EVAL_SAMPLES:-1024}
MAX_EPOCH=${MAX_EPOCH:-2}
PYTHON=${PYTHON:-python3}
sets=(--set "max_epoch=$MAX_EPOCH")
set -f; for kv in ${CONFIG_SET:-}; do sets+=(--set "$kv"); done; set +f
bench=$(cd "$(dirname "$0")" && pwd)

if [ -d "$tree/training/run_benchmarks" ]; then training=$(cd "$tree/training" && pwd)
elif [ -d "$tree/run_benchmarks" ]; then training=$(cd "$tree" && pwd)
else echo "flagperf_training_gpu: $tree: expected a FlagPerf tree (training/run_benchmarks)" >&2; exit 2; fi
case "$nproc" in ''|*[!0-9]*|0) echo "flagperf_training_gpu: NPROC '$nproc': expected a positive integer" >&2
                                 exit 2;; esac
mkdir -p "$out/hand" && out=$(cd "$out" && pwd)
data=${DATA_DIR:-$(mktemp -d /tmp/flagperf_distilbert_data.XXXXXX)}
work=$(mktemp -d /tmp/flagperf_distilbert_logs.XXXXXX)
case_key="distilbert:pytorch:$HW:1:$nproc:1"
config="config_${HW}x1x${nproc}"
# Offline: the model and tokenizer are read from DATA_DIR/model, never from a hub.
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 HF_DATASETS_OFFLINE=1 PYTHONUNBUFFERED=1

{
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
  "$PYTHON" -c 'import sys, torch, transformers, numpy; print("python", sys.version.split()[0], "torch",
torch.__version__, "cuda", torch.version.cuda, "gpus", torch.cuda.device_count(), "transformers",
transformers.__version__, "numpy", numpy.__version__, "tf32 matmul", torch.backends.cuda.matmul.allow_tf32)'
  echo "case $case_key; config $config.py; train_samples $TRAIN_SAMPLES eval_samples $EVAL_SAMPLES" \
       "max_epoch $MAX_EPOCH ${CONFIG_SET:-}"
} 2>&1 | tee "$out/env.txt"

# (a) data and the case config the case key selects
t0=$(date +%s)
"$PYTHON" "$bench/flagperf_training_data.py" data "$data" --train-samples "$TRAIN_SAMPLES" \
    --eval-samples "$EVAL_SAMPLES" >"$out/data_gen.log" 2>&1 || { cat "$out/data_gen.log"; exit 3; }
"$PYTHON" "$bench/flagperf_training_data.py" config "$training" --hardware "$HW" --nnodes 1 --nproc "$nproc" \
    "${sets[@]}" >>"$out/data_gen.log" 2>&1 || { cat "$out/data_gen.log"; exit 3; }
echo "data and config written in $(( $(date +%s) - t0 ))s" | tee -a "$out/data_gen.log"
cp "$training/nvidia/distilbert-pytorch/config/$config.py" "$out/"

# (b) the case started by hand, with the argument list FlagPerf's run.py gives start_pytorch_task.py
t0=$(date +%s)
(cd "$training" && "$PYTHON" run_benchmarks/pytorch/start_pytorch_task.py \
    --vendor nvidia --case_name "$case_key" --model_name distilbert --train_script run_pretraining.py \
    --nnodes 1 --nproc "$nproc" --hosts 127.0.0.1 --hosts_ports 2222 --data_dir "$data" \
    --log_dir "$work" --log_level debug --extern_config_file "$config.py" --enable_extern_config \
    --master_port 29501 --round 1 --master_addr 127.0.0.1 --node_rank 0 --host_addr 127.0.0.1) \
    >"$out/hand/launcher.out" 2>&1
code=$?
echo "$code" >"$out/hand/exit_code"
echo "$(( $(date +%s) - t0 ))" >"$out/hand/wall_seconds"
# The case's log folder is named after the case key (colons): copy its files under plain names.
cp "$work/$case_key/round1/127.0.0.1_noderank0/"*.log "$out/hand/" 2>/dev/null
grep -h '"event": "FINISHED"' "$out/hand/rank0.out.log" 2>/dev/null | tail -1 \
    | sed 's/^\[PerfLog\] //' >"$out/hand/finished.json"
echo "hand run: exit $code in $(cat "$out/hand/wall_seconds")s"
"$PYTHON" -c 'import json, sys
try:
    v = json.load(open(sys.argv[1]))["value"]
except (OSError, ValueError, KeyError):
    sys.exit("no FINISHED PerfLog line: see " + sys.argv[2])
for k in ("throughput(ips)_raw", "throughput(ips)_no_eval", "throughput(ips)_pure_compute", "e2e_time",
          "train_time", "acc", "converged"):
    print(f"  {k}: {v.get(k)}")' "$out/hand/finished.json" "$out/hand/launcher.out"

# (c) the same case, tree, data and config through `flagperf run`, from FlagPerf's own config format: a
# test_conf.py as a user edits it (FLAGPERF_PATH, VENDOR, CASES) with RUNTIME bare. flagperf runs FlagPerf's
# preparation first: the case's requirements.txt pins datasets==2.14.4 and transformers==4.33.0, which pip cannot
# fetch here (no network) and which the case does not import at run time; as a user of an offline machine would,
# the requirement is edited in the carried tree to the transformers that is installed (pip then finds it satisfied).
flagperf_root=$(cd "$bench/.." && pwd)
req="$training/nvidia/distilbert-pytorch/config/requirements.txt"
[ -f "$req" ] && cp "$req" "$out/requirements.txt.orig"
"$PYTHON" -c 'import transformers; print("transformers==" + transformers.__version__)' >"$req"
mkdir -p "$out/flagperf"
result=$(mktemp -d /tmp/flagperf_distilbert_result.XXXXXX)
cat >"$out/flagperf/test_conf.py" <<CONF
VENDOR = "nvidia"
RUNTIME = "bare"
FLAGPERF_PATH = "$training"
FLAGPERF_LOG_PATH = "$result"
ACCE_VISIBLE_DEVICE_ENV_NAME = "CUDA_VISIBLE_DEVICES"
CASES = {"$case_key": "$data"}
CONF
t0=$(date +%s)
(cd "$flagperf_root" && PYTHONPATH=$flagperf_root${PYTHONPATH:+:$PYTHONPATH} "$PYTHON" -m flagperf run \
    --config "$out/flagperf/test_conf.py") >"$out/flagperf/run_output.txt" 2>&1
fcode=$?
echo "$(( $(date +%s) - t0 ))" >"$out/flagperf/wall_seconds"
frun=$(ls -d "$result"/run* 2>/dev/null | head -1)
if [ -n "$frun" ]; then
  cp "$frun/summary.json" "$out/flagperf/summary.json" 2>/dev/null
  tar -C "$result" -czf "$out/flagperf/run.tar.gz" "$(basename "$frun")"
  grep -h '"event": "FINISHED"' "$frun"/*/round1/*_noderank0/rank0.out.log 2>/dev/null | tail -1 \
      | sed 's/^\[PerfLog\] //' >"$out/flagperf/finished.json"
fi
echo "flagperf run: exit $fcode in $(cat "$out/flagperf/wall_seconds")s"
[ -f "$out/requirements.txt.orig" ] && cp "$out/requirements.txt.orig" "$req"

# (d) by hand once more, so that the two by-hand runs show the run-to-run noise the flagperf figure is set against
mkdir -p "$out/hand2"
(cd "$training" && "$PYTHON" run_benchmarks/pytorch/start_pytorch_task.py \
    --vendor nvidia --case_name "$case_key" --model_name distilbert --train_script run_pretraining.py \
    --nnodes 1 --nproc "$nproc" --hosts 127.0.0.1 --hosts_ports 2222 --data_dir "$data" \
    --log_dir "$work" --log_level debug --extern_config_file "$config.py" --enable_extern_config \
    --master_port 29501 --round 2 --master_addr 127.0.0.1 --node_rank 0 --host_addr 127.0.0.1) \
    >"$out/hand2/launcher.out" 2>&1
grep -h '"event": "FINISHED"' "$work/$case_key/round2/127.0.0.1_noderank0/rank0.out.log" 2>/dev/null | tail -1 \
    | sed 's/^\[PerfLog\] //' >"$out/hand2/finished.json"
for side in hand flagperf hand2; do
  "$PYTHON" -c 'import json, sys
try:
    v = json.load(open(sys.argv[1]))["value"]
except (OSError, ValueError, KeyError):
    sys.exit(sys.argv[2] + ": no FINISHED PerfLog line")
print(sys.argv[2], " ".join(f"{k}={v.get(k)}" for k in ("throughput(ips)_raw", "throughput(ips)_no_eval",
      "throughput(ips)_pure_compute", "e2e_time")))' "$out/$side/finished.json" "$side" | tee -a "$out/compare.txt"
done
rm -rf "$result"

[ -n "${DATA_DIR:-}" ] || rm -rf "$data"
rm -rf "$work"
exit "$code"
