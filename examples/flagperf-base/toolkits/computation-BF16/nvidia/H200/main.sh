#!/bin/bash
# FlagPerf toolkit layout: <case>/<vendor>/<chip>/main.sh, run as `bash main.sh` in this folder.
set -e
nvcc=$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)
build=$(mktemp -d)
trap 'rm -rf "$build"' EXIT
"$nvcc" -O3 -std=c++17 ../gemm.cu -lcublas -o "$build/gemm"
"$build/gemm" 8192
