#!/bin/bash
# FlagPerf toolkit layout: <case>/<vendor>/<chip>/main.sh, run as `bash main.sh` in this folder.
# NCCL from the system, else from the nvidia-nccl wheel that PyTorch installs.
set -e
nvcc=$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)
flags=()
if ! echo '#include <nccl.h>' | "$nvcc" -x cu -E - >/dev/null 2>&1; then
    nccl=$(python3 -c 'import nvidia.nccl as m, os; print(os.path.dirname(m.__file__) if m.__file__ else list(m.__path__)[0])')
    flags=(-I"$nccl/include" -L"$nccl/lib" -Xlinker -rpath -Xlinker "$nccl/lib")
    [ -e "$nccl/lib/libnccl.so" ] || ln -sf "$(ls "$nccl"/lib/libnccl.so.* | head -1)" "${build:=$(mktemp -d)}/libnccl.so"
fi
build=${build:-$(mktemp -d)}
trap 'rm -rf "$build"' EXIT
"$nvcc" -O3 -std=c++17 ../allreduce.cu "${flags[@]}" -L"$build" -lnccl -o "$build/allreduce"
"$build/allreduce" 1024 20
