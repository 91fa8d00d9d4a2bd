#!/usr/bin/env bash
# The alternating decode runs of docs/benchmarks.md "The one-row q4_k step at avx2, two panels at once": llama.cpp's
# AVX2 build, then each tessera binary with its avx2 kernels forced, ROUNDS times, decode at depth 512, 32 tokens.
# Usage: alternate.sh MODEL THREADS ROUNDS TESSERA_BIN... (LLAMA_BENCH: the AVX2 llama-bench; OUT: raw outputs)
set -euo pipefail
model="$1" threads="$2" rounds="$3"
shift 3
llama_bench="${LLAMA_BENCH:-$HOME/.cache/tessera/llama.cpp/3.21.1/build-avx2/bin/llama-bench}"
out="${OUT:-/tmp/avx2-alternate}"
mkdir -p "$out"
for r in $(seq "$rounds"); do
  "$llama_bench" -m "$model" -t "$threads" -p 0 -n 32 -d 512 -r 1 -fa 1 -o json >"$out/llama-t$threads-r$r.json"
  line="round $r threads $threads: llama.cpp $(python3 -c "import json,sys; print(round(json.load(open(sys.argv[1]))[0]['avg_ts'], 2))" "$out/llama-t$threads-r$r.json")"
  i=0
  for bin in "$@"; do
    i=$((i + 1))
    TESSERA_CPU_ISA=avx2 "$bin" bench generate --model "$model" --prompt-tokens 512 --gen-tokens 32 \
      --threads "$threads" --repeat 1 >"$out/tessera$i-t$threads-r$r.txt" 2>&1
    line="$line, tessera$i $(awk '/^decode/ {print $4}' "$out/tessera$i-t$threads-r$r.txt")"
  done
  echo "$line"
done
