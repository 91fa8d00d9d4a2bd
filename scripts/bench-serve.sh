#!/usr/bin/env bash
# Regenerates the "Serving" numbers of docs/benchmarks.md: output tokens/s of one `tessera serve` node versus
# client concurrency (continuous batching), and the server's own overhead per token against
# `tessera bench generate` on the same model and backend. Synthetic stories15M weights (seed 1), cpu backend.
#   bash scripts/bench-serve.sh            # writes docs/bench/serve/*.json and docs/bench/serve/summary.md
# Knobs: BACKEND (cpu), THREADS (2), REPEATS (3), CONCURRENCY ("1 2 4 8 16 32 64"), IN (128), OUTLEN (128).
set -euo pipefail
cd "$(dirname "$0")/.."
B=build/release/bin/tessera
BACKEND=${BACKEND:-cpu}
THREADS=${THREADS:-2}
REPEATS=${REPEATS:-3}
CONCURRENCY=${CONCURRENCY:-"1 2 4 8 16 32 64"}
IN=${IN:-128}
OUTLEN=${OUTLEN:-128}
OUT=docs/bench/serve
mkdir -p "$OUT"
tmp=$(mktemp -d)
trap 'kill $server 2>/dev/null || true; rm -rf "$tmp"' EXIT

$B synth --shape stories15M --seed 1 --out "$tmp/s15.bin" --tokenizer-out "$tmp/s15.tok.bin" 2>/dev/null
$B bench generate --model "$tmp/s15.bin" --tokenizer "$tmp/s15.tok.bin" --backend "$BACKEND" --threads "$THREADS" \
  --prompt-tokens "$IN" --gen-tokens "$OUTLEN" --repeat "$REPEATS" > "$OUT/bench-generate.txt"

$B serve --model "$tmp/s15.bin" --tokenizer "$tmp/s15.tok.bin" --backend "$BACKEND" --threads "$THREADS" \
  --max-num-seqs 64 --max-batch-tokens 512 --port 0 > "$tmp/server.out" 2>&1 &
server=$!
for _ in $(seq 100); do grep -q "listening on" "$tmp/server.out" && break; sleep 0.1; done
url=$(grep -o 'http://[0-9.]*:[0-9]*' "$tmp/server.out")

for c in $CONCURRENCY; do
  n=$(( c < 4 ? 8 : 2 * c ))
  for r in $(seq "$REPEATS"); do
    $B bench serve --url "$url" --dataset fixed --input-len "$IN" --output-len "$OUTLEN" --num-prompts "$n" \
      --max-concurrency "$c" --seed "$r" --out "$OUT/c${c}-r${r}.json" > /dev/null
  done
done
kill -TERM $server; wait $server || true

node - "$OUT" "$CONCURRENCY" "$REPEATS" > "$OUT/summary.md" <<'JS'
const fs = require('fs');
const [dir, conc, reps] = [process.argv[2], process.argv[3].split(' ').map(Number), Number(process.argv[4])];
const gen = fs.readFileSync(`${dir}/bench-generate.txt`, 'utf8');
const decode = Number(gen.match(/decode\s+tok\/s median ([\d.]+)/)[1]);
const rows = [];
let base = null;
for (const c of conc) {
  const runs = [];
  for (let r = 1; r <= reps; r++) runs.push(JSON.parse(fs.readFileSync(`${dir}/c${c}-r${r}.json`, 'utf8')));
  const tput = runs.map((j) => j.output_throughput).sort((a, b) => a - b);
  const med = tput[Math.floor(tput.length / 2)];
  if (base === null) base = med;
  const tpot = runs.map((j) => j.median_tpot_ms).sort((a, b) => a - b)[Math.floor(runs.length / 2)];
  const ttft = runs.map((j) => j.median_ttft_ms).sort((a, b) => a - b)[Math.floor(runs.length / 2)];
  rows.push(`| ${c} | ${med.toFixed(1)} | ${tput[0].toFixed(1)}-${tput[tput.length - 1].toFixed(1)} | ${(med / base).toFixed(2)}x | ${ttft.toFixed(1)} | ${tpot.toFixed(2)} |`);
}
const c1 = JSON.parse(fs.readFileSync(`${dir}/c${conc[0]}-r1.json`, 'utf8'));
console.log('| concurrency | output tok/s (median) | min-max | gain over c=1 | median TTFT ms | median TPOT ms |');
console.log('| --- | --- | --- | --- | --- | --- |');
rows.forEach((r) => console.log(r));
console.log('');
console.log(`bench generate decode: ${decode} tok/s = ${(1000 / decode).toFixed(2)} ms/token; ` +
            `server at concurrency ${conc[0]}: median TPOT ${c1.median_tpot_ms.toFixed(2)} ms ` +
            `-> overhead ${(c1.median_tpot_ms - 1000 / decode).toFixed(2)} ms/token`);
JS
cat "$OUT/summary.md"
