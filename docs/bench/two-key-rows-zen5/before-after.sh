#!/bin/bash
# Tessera before and after alternating on one model (docs/benchmarks.md, "Two key rows a step"): decode of 32
# tokens at depth N with a KV cache of type KV, 2 threads. Swap BEFORE and AFTER for a round in reverse order.
#   usage: BEFORE=old/tessera AFTER=build/release/bin/tessera before-after.sh KV MODEL N ROUNDS
set -euo pipefail
kv=$1 model=$2 n=$3 rounds=$4
run() {
  "$1" bench generate --model "$model" --prompt-tokens "$n" --gen-tokens 32 --threads 2 --repeat 1 --kv-dtype "$kv" \
    --no-ceilings 2>&1 | grep -E '^(prefill|decode)' | awk '{print $1, $4}' | tr '\n' ' '
}
date -u
for i in $(seq 1 "$rounds"); do
  echo "round $i kv $kv depth $n | before: $(run "$BEFORE") | after: $(run "$AFTER")"
done
date -u
