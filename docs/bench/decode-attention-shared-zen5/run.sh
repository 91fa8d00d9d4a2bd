#!/bin/bash
# Decode attention before/after (docs/benchmarks.md, "Decode attention: a row widened once for its query heads"):
# `tessera bench step` of two builds, alternating, on cuts where attention is most of a step (4 layers, feed-forward
# width 256), f16 KV, 2 threads. OLD and NEW: the two tessera binaries; DIR: where the cuts are (written if absent).
set -euo pipefail
: "${OLD:?the build before}" "${NEW:?the build after}"
DIR="${DIR:-/tmp}"
[[ -f $DIR/att128.gguf ]] || "$NEW" synth --shape mistral-7b --layers 4 --hidden-dim 256 --format gguf --dtype q4_k \
  --max-seq-len 16640 --out "$DIR/att128.gguf" --tokenizer-out "$DIR/att128.tok"
[[ -f $DIR/att64.gguf ]] || "$NEW" synth --shape llama3.2-1b --layers 4 --hidden-dim 256 --format gguf --dtype q4_k \
  --max-seq-len 16640 --out "$DIR/att64.gguf" --tokenizer-out "$DIR/att64.tok"
for round in 1 2 3; do
  for m in att128 att64; do
    for ctx in 512 4096 16384; do
      for v in OLD NEW; do
        r=$("${!v}" bench step --model "$DIR/$m.gguf" --tokenizer "$DIR/$m.tok" --threads 2 --batch 1 --context $ctx \
          --kv-dtype f16 --steps 32 --repeat 3 2>&1 | tail -1)
        echo "$round $m $ctx $v $r"
      done
    done
  done
done
