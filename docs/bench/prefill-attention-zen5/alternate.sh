#!/bin/bash
# Prefill of P tokens (8192, 16384) on the llama3.2-1b shape at 4 layers with a 32768-token context, Q4_K_M, 2 threads:
# llama.cpp (-fa on), tessera BEFORE, tessera AFTER, alternating, three rounds. Raw outputs into OUT.
#   BEFORE=<tessera binary> AFTER=<tessera binary> [MODEL=...] [LLAMA_BENCH=...] [OUT=dir] alternate.sh
# The model is the one `scripts/bench-vs-llamacpp.sh` makes with DEPTHS=16384 PREFILL=8192 (see docs/benchmarks.md).
set -euo pipefail
M=${MODEL:-$HOME/.cache/tessera/bench-vs-llamacpp/llama3.2-1b-l4-c32768-s1-Q4_K_M.gguf}
LB=${LLAMA_BENCH:-$HOME/.cache/tessera/llama.cpp/3.21.1/build/bin/llama-bench}
OUT=${OUT:-raw}
mkdir -p "$OUT"
for r in 1 2 3; do
  for P in 8192 16384; do
    echo "round $r P $P load $(cut -d' ' -f1 /proc/loadavg)"
    "$LB" -m "$M" -t 2 -p "$P" -n 0 -r 1 -fa 1 --no-warmup -o json > "$OUT/llama-$P-$r.json" 2>/dev/null
    python3 -c "import json;print('llama.cpp', json.load(open('$OUT/llama-$P-$r.json'))[0]['avg_ts'])"
    for b in before after; do
      bin=$BEFORE
      [[ $b == after ]] && bin=$AFTER
      "$bin" bench generate --model "$M" --prompt-tokens "$P" --gen-tokens 1 --threads 2 --repeat 1 --warmup 0 \
        --no-ceilings > "$OUT/$b-$P-$r.txt" 2>&1
      echo "$b $(grep -o 'prefill  tok/s median [0-9.]*' "$OUT/$b-$P-$r.txt")"
    done
  done
done
