#!/bin/bash
# A q8_0 KV cache side by side (docs/benchmarks.md, "A q8_0 or q4_0 cache read in place"): llama.cpp with
# -fa 1 -ctk "$kv" -ctv "$kv", then tessera before and after, alternating, on the llama3.2-1b shape cut to 4 layers.
#   MODEL: tessera synth --shape llama3.2-1b --layers 4 --format gguf --dtype f16 --seed 1 --max-seq-len 32768 \
#            --out l4-f16.gguf && llama-quantize l4-f16.gguf l4-Q4_K_M.gguf Q4_K_M
#   usage: BEFORE=old/tessera AFTER=build/release/bin/tessera MODEL=l4-Q4_K_M.gguf \
#            LLAMA_BENCH=~/.cache/tessera/llama.cpp/3.21.1/build/bin/llama-bench q8_0-kv.sh decode|prefill TOKENS [ROUNDS]
#   KV=bf16 (or f16, q4_0) runs both engines with that cache type instead of q8_0.
set -euo pipefail
mode=$1 n=$2 rounds=${3:-3} kv=${KV:-q8_0}
tessera() {
  "$1" bench generate --model "$MODEL" --prompt-tokens "$n" --gen-tokens 32 --threads 2 --repeat 1 --kv-dtype "$kv" \
    --no-ceilings 2>&1 | grep -E '^(prefill|decode)' | awk '{print $1, $4}' | tr '\n' ' '
}
date -u
for i in $(seq 1 "$rounds"); do
  if [[ $mode == decode ]]; then
    args=(-p 0 -n 32 -d "$n")
  else
    args=(-p "$n" -n 0)
  fi
  l=$("$LLAMA_BENCH" -m "$MODEL" -t 2 "${args[@]}" -r 1 -fa 1 -ctk "$kv" -ctv "$kv" -o json 2>/dev/null |
    grep -o '"avg_ts": [0-9.]*' | head -1)
  echo "round $i $mode $n | llama.cpp $mode $l | tessera before: $(tessera "$BEFORE") | after: $(tessera "$AFTER")"
done
date -u
