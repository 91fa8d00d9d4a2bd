#!/usr/bin/env bash
# $1: binary. Decode attention configs, threads 2, median-of-repeat printed by the tool.
B=$1
for cfg in "8 2 256 1 1024" "8 2 256 1 4096" "8 2 256 8 4096" "32 8 128 1 512" "32 8 128 1 4096" "32 8 128 1 16384" "32 8 128 16 4096" "8 1 256 1 900" "32 32 128 1 4096"; do
  set -- $cfg
  r=$($B bench attention --heads $1 --kv-heads $2 --head-dim $3 --batch $4 --context $5 --threads 2 --repeat 30 2>&1 | grep -i -E 'median|ms' | tail -1)
  echo "heads $1/$2 hd $3 batch $4 ctx $5: $r"
done
