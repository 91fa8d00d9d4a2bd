#!/bin/bash
# Alternating old/new `tessera bench step` on attention-heavy cuts (4 layers, narrow FFN), f16 KV, 2 threads.
OLD=/work/wt-base/build/release/bin/tessera; NEW=/work/main/build/release/bin/tessera
for round in 1 2 3; do
  for m in att128 att64; do
    for ctx in 512 4096 16384; do
      for v in OLD NEW; do
        bin=${!v}
        r=$($bin bench step --model /tmp/$m.gguf --tokenizer /tmp/$m.tok --threads 2 --batch 1 --context $ctx --kv-dtype f16 --steps 32 --repeat 3 2>&1 | tail -1)
        echo "$round $m $ctx $v $r"
      done
    done
  done
done
