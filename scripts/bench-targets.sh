#!/usr/bin/env bash
# Re-measures the operator-layer and transfer-runtime targets of docs/benchmarks.md in one unattended run:
# decode/prefill of the synthetic stories110M and stories15M shapes on the cpu backend (each beside its
# same-run bandwidth and FMA ceilings), OpenCL beside them, and `tessera link bench` for shm, tcp and ucx
# (each beside its same-run ceiling). Prints everything to stdout with the load average before each run;
# run it on an otherwise idle machine. Usage: scripts/bench-targets.sh [ops|link|all] > out.txt
set -euo pipefail
cd "$(dirname "$0")/.."
what=${1:-all}
B=${TESSERA_BIN:-build/release/bin/tessera}
[[ -x $B ]] || { echo "build first: bash scripts/build release" >&2; exit 1; }
W=${TESSERA_BENCH_DIR:-/tmp/tessera-bench}
mkdir -p "$W"
load() { echo "# $(date -u +%H:%M:%S) load average: $(cut -d' ' -f1-3 /proc/loadavg)"; }
run() { load; echo "\$ $*"; "$@" 2>&1; echo; }

if [[ $what == ops || $what == all ]]; then
  [[ -f $W/s110.bin ]] || $B synth --shape stories110M --out "$W/s110.bin" --tokenizer-out "$W/s110.tok.bin" --seed 1
  [[ -f $W/s15.bin ]] || $B synth --shape stories15M --out "$W/s15.bin" --tokenizer-out "$W/s15.tok.bin" --seed 1
  for d in f16 q8_0 f32 q4_0; do
    for t in 2 1; do
      run $B bench generate --model "$W/s110.bin" --tokenizer "$W/s110.tok.bin" --backend cpu --threads $t \
        --prompt-tokens 512 --gen-tokens 32 --repeat 3 --weight-dtype $d
      run $B bench generate --model "$W/s15.bin" --tokenizer "$W/s15.tok.bin" --backend cpu --threads $t \
        --prompt-tokens 128 --gen-tokens 64 --repeat 3 --weight-dtype $d
    done
  done
  for d in f32 f16; do
    run $B bench generate --model "$W/s15.bin" --tokenizer "$W/s15.tok.bin" --backend opencl --threads 2 \
      --prompt-tokens 128 --gen-tokens 32 --repeat 3 --weight-dtype $d
    run $B bench generate --model "$W/s110.bin" --tokenizer "$W/s110.tok.bin" --backend opencl --threads 2 \
      --prompt-tokens 64 --gen-tokens 16 --repeat 2 --weight-dtype $d
  done
fi

if [[ $what == link || $what == all ]]; then
  run $B link bench --endpoint shm --sizes 4K..256M --repeats 5
  run $B link bench --endpoint tcp --sizes 4K..256M --repeats 5
  run $B link bench --endpoint tcp --sizes 64K --batch 16 --repeats 5
  UCX_TLS=tcp run $B link bench --endpoint ucx --sizes 64K,1M,4M,64M,256M --repeats 3
  UCX_TLS=posix,cma run $B link bench --endpoint ucx --sizes 64K,1M,4M,64M,256M --repeats 3
fi
