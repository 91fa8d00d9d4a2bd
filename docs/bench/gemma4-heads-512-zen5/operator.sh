#!/bin/bash
# Decode attention with heads of 512 (docs/benchmarks.md, "Gemma 4's heads of 512 with a q8_0 or q4_0 cache"): the
# operator alone, before and after alternating, every cache type, both kernel builds.
#   usage: BEFORE=old/tessera AFTER=build/release/bin/tessera operator.sh [ROUNDS]
set -euo pipefail
rounds=${1:-3}
run() {
  TESSERA_CPU_ISA=$1 "$2" bench attention --kv-dtype "$3" --context "$4" --heads "$5" --kv-heads "$6" --head-dim 512 \
    --threads 2 --repeat 10 2>&1 | tail -1 | grep -o 'median [0-9.]* ms' | awk '{print $2}'
}
date -u
for i in $(seq 1 "$rounds"); do
  for isa in avx512 avx2; do
    for hk in "8 1" "32 4" "32 16"; do
      set -- $hk
      for ctx in 512 8192; do
        for kv in f16 q8_0 q4_0; do
          echo "round $i $isa heads $1/$2 ctx $ctx $kv: before $(run $isa "$BEFORE" $kv $ctx $1 $2) after $(run $isa "$AFTER" $kv $ctx $1 $2) ms"
        done
      done
    done
  done
done
date -u
