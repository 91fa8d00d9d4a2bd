#!/bin/bash
# Prefill side by side (docs/benchmarks.md, "q8_0 prefill: a tile's weights decoded once"): llama.cpp, then tessera
# before and after, alternating, each engine with its defaults, one run each per round.
#   usage: BEFORE=old/tessera AFTER=build/release/bin/tessera MODEL=file.gguf THREADS=2 \
#            LLAMA_BENCH=~/.cache/tessera/llama.cpp/3.21.1/build/bin/llama-bench side-by-side.sh TOKENS [ROUNDS]
#   TESSERA_CPU_ISA=avx2 (exported) limits both tessera binaries to their avx2 kernels.
set -euo pipefail
n=$1 rounds=${2:-3} t=${THREADS:-2}
tessera() {
  "$1" bench generate --model "$MODEL" --prompt-tokens "$n" --gen-tokens 1 --threads "$t" --repeat 1 \
    --no-ceilings 2>&1 | grep -E '^prefill' | awk '{print $4}'
}
date -u
for i in $(seq 1 "$rounds"); do
  l=$("$LLAMA_BENCH" -m "$MODEL" -t "$t" -p "$n" -n 0 -r 1 -o json 2>/dev/null | grep -o '"avg_ts": [0-9.]*' |
    head -1 | awk '{print $2}')
  echo "round $i prefill $n threads $t | llama.cpp $l | tessera before $(tessera "$BEFORE") | after $(tessera "$AFTER")"
done
date -u
