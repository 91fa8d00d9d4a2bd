#!/usr/bin/env bash
# Sliding-window layers keeping only their windows against keeping every position: `tessera bench generate` on the
# same file, the two alternating, three rounds. Usage: run.sh MODEL.gguf OUT_DIR [PROMPT] [GEN]
set -euo pipefail
model=$1 out=$2 prompt=${3:-8192} gen=${4:-64}
bin=${TESSERA_BIN:-build/release/bin/tessera}
mkdir -p "$out"
for round in 1 2 3; do
  for mode in windowed whole; do
    flag=()
    [[ $mode == whole ]] && flag=(--disable-hybrid-kv-cache-manager)
    "$bin" bench generate --model "$model" --prompt-tokens "$prompt" --gen-tokens "$gen" --threads 2 --repeat 1 \
      --warmup 0 --no-ceilings "${flag[@]}" > "$out/$mode-r$round.txt" 2>&1
    echo "$mode r$round: $(grep -E '^(kv|prefill|decode)' "$out/$mode-r$round.txt" | tr -s ' ' | tr '\n' ' ')"
  done
done
