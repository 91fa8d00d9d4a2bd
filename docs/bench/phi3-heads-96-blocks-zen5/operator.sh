#!/bin/bash
# Attention with heads of 96, one per kv head (Phi-3; docs/benchmarks.md, "Phi-3's heads of 96 with a q8_0 or q4_0
# cache"): the operator alone, decode and a 500-token prefill chunk, before and after alternating, both kernel builds.
#   usage: BEFORE=old/tessera AFTER=build/release/bin/tessera operator.sh [ROUNDS]
set -euo pipefail
rounds=${1:-3}
run() {  # isa binary kv context queries
  TESSERA_CPU_ISA=$1 "$2" bench attention --kv-dtype "$3" --context "$4" --queries "$5" --heads 32 --kv-heads 32 \
    --head-dim 96 --threads 2 --repeat "$6" 2>&1 | tail -1 | grep -o 'median [0-9.]* ms' | awk '{print $2}'
}
date -u
for i in $(seq 1 "$rounds"); do
  for isa in avx512 avx2; do
    for kv in f16 q8_0 q4_0; do
      for ctx in 200 2000; do
        echo "round $i $isa decode ctx $ctx $kv: before $(run $isa "$BEFORE" $kv $ctx 1 10) after $(run $isa "$AFTER" $kv $ctx 1 10) ms"
      done
      echo "round $i $isa prefill 500 ctx 2000 $kv: before $(run $isa "$BEFORE" $kv 2000 500 3) after $(run $isa "$AFTER" $kv 2000 500 3) ms"
    done
  done
done
date -u
