#!/usr/bin/env bash
# `tessera serve --deterministic` (docs/benchmarks.md, "Deterministic mode"): what it costs prefill, and what it buys.
#   bash docs/bench/deterministic/run.sh [TESSERA]      # writes prefill.txt and turns.txt here
# 1. Prefill tok/s of the llama3.2-1b shape at 4 layers, Q4_K_M, 2 threads, with and without the option, alternating,
#    three rounds per prompt length.
# 2. One user's four turns (docs/bench/hybrid-prefix-running/turns.py: a 1024-token system prompt, 32-token messages,
#    64-token greedy replies, the whole history each turn) against four nodes in turn: deterministic with and without
#    the prefix cache, default with and without it; counts the reply logprobs that differ from the no-reuse node's bits.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
B=${1:-$HERE/../../../build/release/bin/tessera}
M=${MODEL:-/tmp/l4-q4k.gguf}
[ -f "$M" ] || "$B" synth --shape llama3.2-1b --format gguf --dtype q4_k --layers 4 --max-seq-len 8192 --out "$M" > /dev/null
{
  lscpu | grep -E 'Model name|CPU family|^Model:'
  for P in 512 2048 8000; do
    for round in 1 2 3; do
      for mode in plain deterministic; do
        extra=(); [ $mode = deterministic ] && extra=(--deterministic)
        tps=$("$B" bench generate --model "$M" --prompt-tokens $P --gen-tokens 8 --threads 2 --repeat 1 --no-ceilings \
          "${extra[@]}" 2>&1 | awk '/^prefill/ {print $4}')
        echo "prompt $P round $round $mode: prefill $tps tok/s"
      done
    done
  done
} | tee "$HERE/prefill.txt"
node() {
  local port=$1; shift
  "$B" serve --model "$M" --port "$port" --backend cpu --threads 2 --max-model-len 4096 "$@" > "/tmp/det-serve-$port.log" 2>&1 &
  local pid=$!
  for _ in $(seq 1 60); do curl -sf "localhost:$port/v1/models" > /dev/null && break; sleep 1; done
  python3 "$HERE/../hybrid-prefix-running/turns.py" "http://127.0.0.1:$port" "/tmp/det-turns-$port.json" 2>&1 | tr '\n' ' '
  echo
  kill "$pid"; wait "$pid" 2> /dev/null || true
}
{
  node 18101 --deterministic
  node 18102 --deterministic --no-prefix-cache
  node 18103
  node 18104 --no-prefix-cache
  python3 - << 'PY'
import json
a, b, c, d = [json.load(open(f"/tmp/det-turns-{p}.json")) for p in (18101, 18102, 18103, 18104)]
cmp = lambda x, y: [sum(1 for i, j in zip(tx, ty) if i != j) for tx, ty in zip(x, y)]
print("deterministic, prefix cache against none: reply logprobs that differ, per turn:", cmp(a, b))
print("default, prefix cache against none: reply logprobs that differ, per turn:", cmp(c, d))
print("deterministic against default, no cache:", cmp(b, d))
PY
} | tee "$HERE/turns.txt"
