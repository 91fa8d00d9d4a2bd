#!/bin/bash
# Decode attention through the avx512 build's shared kernels (docs/benchmarks.md, "Two key rows a step"): the
# operator alone, before and after alternating, heads of 64 to 512, f16 / q8_0 / q4_0 caches, 2 threads.
#   usage: BEFORE=old/tessera AFTER=build/release/bin/tessera operator.sh [ROUNDS]
set -euo pipefail
rounds=${1:-3}
run() {
  "$1" bench attention --kv-dtype "$2" --context "$3" --heads "$4" --kv-heads "$5" --head-dim "$6" --threads 2 \
    --repeat 20 2>&1 | tail -1 | grep -o 'median [0-9.]* ms' | awk '{print $2}'
}
date -u
for i in $(seq 1 "$rounds"); do
  for shape in "8 1 512" "32 4 512" "8 1 256" "16 8 256" "32 8 128" "32 8 64"; do
    set -- $shape
    for ctx in 4096 16384; do
      for kv in f16 q8_0 q4_0; do
        echo "round $i heads $1/$2 of $3 ctx $ctx $kv: before $(run "$BEFORE" $kv $ctx $1 $2 $3) after $(run "$AFTER" $kv $ctx $1 $2 $3) ms"
      done
    done
  done
done
date -u
