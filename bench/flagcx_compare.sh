#!/usr/bin/env bash
# flagperf's all_reduce over NCCL and over FlagCX, beside FlagCX's own perf test, on one host (docs/flagcx.md;
# the figures of docs/results/h100x4-flagcx.md). Usage: bench/flagcx_compare.sh OUT_DIR
# Needs FlagCX built on this host (FLAGCX_HOME, default /tmp/FlagCX: `make USE_NVIDIA=1` and test/perf built), its
# torch plug-in importable (FLAGCX_PYTHONPATH, e.g. $FLAGCX_HOME/plugin/torch after an in-place build), the
# libraries its binaries need (FLAGCX_LD_LIBRARY_PATH, default $FLAGCX_HOME/build/lib) and an mpirun on PATH;
# ENV_SH (default /tmp/flagcx_env.sh), when it exists, is sourced first and may set all of these.
# Three flagperf runs on this machine (bare runtime, localhost), each in its own FLAGPERF_LOG_PATH under a temp dir:
#   a. the collectives benchmark over NCCL          (vendor nvidia,        dist_backend nccl)
#   b. the same over FlagCX's torch backend         (vendor nvidia-flagcx, "cpu:gloo,cuda:flagcx" + module flagcx)
#   c. examples/flagcx_perf (launch: mpi)            FlagCX's test_allreduce under one mpirun
# The vendor profile nvidia-flagcx and the sweep settings (hw label "fxcmp") live in a temporary copy of
# flagperf's host tree (FLAGPERF_HOME), never in the repository. OUT_DIR gets flat files: <x>_summary.json,
# <x>_run_output.txt, the rank/node/monitor logs of every run (a_*, b_*, c_*), smi.csv, table.txt.
# Settings (environment): FX_MODE (gpu; cpu: the local rehearsal with gloo and a stand-in FlagCX), NPROC,
# SIZES, BUDGET, PY, ENV_SH, SITE, FLAGCX_ARGS.
set -uo pipefail
OUT=${1:?usage: bench/flagcx_compare.sh OUT_DIR}
mkdir -p "$OUT" && OUT=$(cd "$OUT" && pwd)
KIT=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd "$KIT/.." && pwd)
FX_MODE=${FX_MODE:-gpu}
PY=${PY:-python3}
ENV_SH=${ENV_SH:-/tmp/flagcx_env.sh}
SITE=${SITE:-/tmp/site}
HW=fxcmp
T0=$(date +%s)
say() { echo "[run +$(( $(date +%s) - T0 ))s] $*"; }

if [ -f "$ENV_SH" ]; then . "$ENV_SH"; fi
export NCCL_NVLS_ENABLE=0 TORCH_DEVICE_BACKEND_AUTOLOAD=0 FLAGCX_DEBUG=${FLAGCX_DEBUG:-WARN}
# Open MPI (c's mpirun and FlagCX's MPI_Bcast/Barrier/Allreduce of a few bytes): one host, shared memory, no UCX
export OMPI_MCA_pml=${OMPI_MCA_pml:-ob1} OMPI_MCA_btl=${OMPI_MCA_btl:-self,sm,tcp}
# the build's step logs, flat, where LOGDIR names them
for f in "${LOGDIR:-/nonexistent}"/*.log; do [ -f "$f" ] && cp "$f" "$OUT/build_$(basename "$f")"; done
FLAGCX_HOME=${FLAGCX_HOME:-/tmp/FlagCX}

# flagperf's own wheels (paramiko, ...) into $SITE once
if [ -d "$REPO/.whl" ] && ! PYTHONPATH="$SITE" "$PY" -c 'import paramiko' 2>/dev/null; then
  "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$SITE" "$REPO"/.whl/*.whl \
    >"$OUT/pip_site.txt" 2>&1 || say "warning: pip install of .whl failed (see pip_site.txt)"
fi
export PYTHONPATH="$REPO:$SITE${FLAGCX_PYTHONPATH:+:$FLAGCX_PYTHONPATH}${PYTHONPATH:+:$PYTHONPATH}"

W=$(mktemp -d /tmp/fxrun.XXXXXX)
TREE=$W/tree
mkdir -p "$TREE"
cp -a "$REPO"/benchmarks "$REPO"/vendors "$REPO"/launcher "$REPO"/monitors "$REPO"/configs "$REPO"/examples \
  "$REPO"/flagperf_contract.py "$TREE"/
find "$TREE" -name __pycache__ -prune -exec rm -rf {} + 2>/dev/null

FLAGCX_ARGS=${FLAGCX_ARGS:--b 1M -e 1G -f 2}
LDP="${FLAGCX_LD_LIBRARY_PATH:-$FLAGCX_HOME/build/lib}"
if [ "$FX_MODE" = gpu ]; then
  NPROC=${NPROC:-4}
  VA=nvidia; VB=nvidia-flagcx; VC=nvidia
  SIZES=${SIZES:-'"1M", "2M", "4M", "8M", "16M", "32M", "64M", "128M", "256M", "512M", "1G"'}
  BUDGET=${BUDGET:-11}
  # NVIDIA GPUs with FlagCX's torch plug-in as the CUDA backend (docs/flagcx.md); gloo for CPU tensors
  DESC="NVIDIA GPUs over FlagCX (torch plug-in flagcx)"; DEVICE=cuda; BACKEND="cpu:gloo,cuda:flagcx"
  VISIBLE=CUDA_VISIBLE_DEVICES; MONITOR=nvml
else
  # local rehearsal: CPU ranks over gloo; b over the composite "cpu:gloo" with a stand-in module named flagcx
  NPROC=${NPROC:-2}
  VA=cpu; VB=cpu-fxcomposite; VC=cpu-fxcomposite   # c with a rank_env too, as nvidia has
  SIZES=${SIZES:-'"64K", "256K", "1M", "4M"'}
  BUDGET=${BUDGET:-2}
  DESC="CPU ranks over the composite cpu:gloo with a stand-in module flagcx"; DEVICE=cpu; BACKEND="cpu:gloo"
  VISIBLE=null; MONITOR=none
fi
mkdir -p "$TREE/vendors/$VB"
cat >"$TREE/vendors/$VB/vendor.yaml" <<EOF
name: $VB
description: $DESC
device: $DEVICE
dist_backend: "$BACKEND"
dist_backend_module: flagcx
visible_devices_env: $VISIBLE
gpu_monitor: $MONITOR
rank_env:
  NCCL_NVLS_ENABLE: "0"
frameworks: [pytorch]
EOF
for v in "$VA" "$VB"; do
  mkdir -p "$TREE/vendors/$v/collectives"
  cat >"$TREE/vendors/$v/collectives/config_$HW.yaml" <<EOF
# flagcx_compare.sh: all_reduce over the node's ranks, the sizes of FlagCX's perf test ($FLAGCX_ARGS)
ops: [all_reduce]
sizes: [$SIZES]
time_budget_s: $BUDGET
warmup: 5
EOF
done
mkdir -p "$TREE/vendors/$VC/flagcx_perf"
cat >"$TREE/vendors/$VC/flagcx_perf/config_$HW.yaml" <<EOF
env:
  FLAGCX_HOME: "$FLAGCX_HOME"
  FLAGCX_TEST: allreduce
  FLAGCX_ARGS: "$FLAGCX_ARGS"
  LD_LIBRARY_PATH: "$LDP"
EOF

conf() {   # conf NAME VENDOR CASE_TIMEOUT CASE [CASE_PATHS]
  cat >"$W/conf_$1.yaml" <<EOF
VENDOR: $2
RUNTIME: bare
FLAGPERF_LOG_LEVEL: info
CLEAR_CACHES: false
MONITOR_INTERVAL: 1
CASE_TIMEOUT: $3
FLAGPERF_LOG_PATH: $W/res_$1
${5:+CASE_PATHS: [$5]}
CASES:
  "$4": null
EOF
}
# CASE_TIMEOUT (flagperf ends the case and still writes its summary) well inside this script's own limit per run
conf a "$VA" 100 "collectives:pytorch:$HW:1:$NPROC:1"
conf b "$VB" 120 "collectives:pytorch:$HW:1:$NPROC:1"
conf c "$VC" 90 "flagcx_perf:pytorch:$HW:1:$NPROC:1" "$TREE/examples"

smi() {   # smi LABEL: one csv snapshot per GPU
  if command -v nvidia-smi >/dev/null; then
    nvidia-smi --query-gpu=index,clocks.sm,power.draw,temperature.gpu --format=csv,noheader 2>&1 \
      | sed "s/^/$1, /" >>"$OUT/smi.csv"
  fi
}
echo "label, index, clocks.sm [MHz], power.draw [W], temperature.gpu" >"$OUT/smi.csv"

{
  echo "mode $FX_MODE nproc $NPROC tree $TREE"
  command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader \
    && nvidia-smi topo -m
  "$PY" -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'nccl', torch.cuda.nccl.version() if torch.cuda.is_available() else '-')"
  echo "mpirun: $(command -v mpirun) ($(mpirun --version 2>&1 | head -1))"
  echo "PYTHONPATH=$PYTHONPATH"
  cat "$TREE/vendors/$VB/vendor.yaml" "$TREE/vendors/$VA/collectives/config_$HW.yaml" \
    "$TREE/vendors/$VC/flagcx_perf/config_$HW.yaml"
} >"$OUT/env.txt" 2>&1

collect() {   # collect NAME: the run's files, flat, into OUT as NAME_<case>_<node>_<file>
  local name=$1 run f rel flat
  run=$(ls -d "$W/res_$name"/run* 2>/dev/null | head -1)
  [ -n "$run" ] || { say "$name: no run directory under $W/res_$name"; return; }
  for f in summary.json flagperf_run.log report.md; do
    [ -f "$run/$f" ] && cp "$run/$f" "$OUT/${name}_$f"
  done
  while IFS= read -r f; do
    rel=${f#"$run"/}
    flat=$(echo "$rel" | sed 's#/round[0-9]*/#_#; s#/#_#g')
    cp "$f" "$OUT/${name}_$flat"
  done < <(find "$run" -mindepth 3 -type f \( -name 'rank*.out.log' -o -name 'rank*.exit' -o -name 'node.out.log' \
            -o -name '*monitor*.log' -o -name 'launcher.log' -o -name 'launcher.out.log' -o -name 'ranks.json' \
            -o -name 'launch.json' -o -name 'monitor_status.json' \) -size -8M)
}

runone() {   # runone NAME LIMIT_S
  local name=$1 limit=$2 rc
  smi "before_$name"
  say "$name: flagperf run --config $W/conf_$name.yaml (limit ${limit}s)"
  ( cd "$W" && FLAGPERF_HOME="$TREE" timeout -k 10 "$limit" "$PY" -m flagperf run --config "$W/conf_$name.yaml" \
      ${FX_DRY:+--dry-run} ) \
    >"$OUT/${name}_run_output.txt" 2>&1
  rc=$?
  smi "after_$name"
  say "$name: exit $rc; $(grep -E 'PASS|FAIL|error|Error' "$OUT/${name}_run_output.txt" | tail -n 3 | tr '\n' ' ' | cut -c1-300)"
  collect "$name"
}

runone a "${LIMIT_A:-140}"
if [ "$FX_MODE" = gpu ] && ! PYTHONPATH="$PYTHONPATH" "$PY" -c 'import torch, flagcx' >"$OUT/b_import.txt" 2>&1; then
  say "b: import flagcx fails here (b_import.txt); running b anyway for flagperf's own message"
fi
runone b "${LIMIT_B:-160}"
runone c "${LIMIT_C:-130}"
smi end

"$PY" "$KIT/flagcx_table.py" "$OUT" | tee "$OUT/table.txt"
say "done; files in $OUT: $(ls "$OUT" | wc -l); temp dir $W"
