#!/usr/bin/env bash
# The KV transfer's share of time to first token in prefill/decode disaggregation (docs/benchmarks.md,
# "PD: the KV transfer's share of TTFT"). Synthetic stories110M weights (seed 1, context stretched to 4160
# so 4096-token prompts fit), prefill node on CPU 0 and decode node on CPU 1 (cpu backend, 1 thread each),
# for every link (shm, tcp) x layer-wise overlap (on, off) x prompt length: REPEATS single requests one
# after another (output 1 token, so TTFT is the whole request), each followed by a scrape of the decode
# node's PD timing counters. A `tessera link bench` of the same link at the per-layer write sizes is the
# ceiling.
#   bash scripts/bench-pd-kv.sh      # writes docs/bench/pd-kv/{raw.jsonl,summary.md,env.txt}
# Knobs: LENGTHS ("128 512 1024 2048 4096"), REPEATS (2), LONG_REPEATS (REPEATS; for prompts over 1024), LINKS ("shm tcp"), OVERLAPS ("on off"),
#        CHUNK (512: prefill chunk = --max-batch-tokens), OUT (docs/bench/pd-kv),
#        PREFILL_BACKEND / DECODE_BACKEND (cpu; e.g. DECODE_BACKEND=opencl), TESSERA (the binary to run).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
B=${TESSERA:-$ROOT/build/release/bin/tessera}
PREFILL_BACKEND=${PREFILL_BACKEND:-cpu}
DECODE_BACKEND=${DECODE_BACKEND:-cpu}
LENGTHS=${LENGTHS:-"128 512 1024 2048 4096"}
REPEATS=${REPEATS:-2}
LONG_REPEATS=${LONG_REPEATS:-$REPEATS}
LINKS=${LINKS:-"shm tcp"}
OVERLAPS=${OVERLAPS:-"on off"}
CHUNK=${CHUNK:-512}
OUT=${OUT:-docs/bench/pd-kv}
[ -x "$B" ] || { echo "bench-pd-kv: $B missing; run: bash scripts/build release" >&2; exit 1; }
command -v taskset > /dev/null || { echo "bench-pd-kv: taskset (util-linux) is needed" >&2; exit 1; }
command -v node > /dev/null || { echo "bench-pd-kv: node is needed for the summary" >&2; exit 1; }
mkdir -p "$OUT"
tmp=$(mktemp -d)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill -TERM "$p" 2> /dev/null || true; done
  for p in "${pids[@]}"; do wait "$p" 2> /dev/null || true; done
  rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# start_node NAME CPU BACKEND ARGS...: starts `tessera serve` pinned to CPU; sets $url. (Not called through $(...):
# the pid must be recorded in this shell so the nodes are stopped.)
start_node() {
  local name=$1 cpu=$2 backend=$3
  shift 3
  taskset -c "$cpu" "$B" serve --model "$tmp/s110.bin" --tokenizer "$tmp/s110.tok.bin" --backend "$backend" --threads 1 \
    --port 0 --kv-memory 1200 --max-num-seqs 4 --max-batch-tokens "$CHUNK" "$@" > "$tmp/$name.out" 2> "$tmp/$name.err" &
  pids+=($!)
  for _ in $(seq 600); do
    if grep -q "listening on" "$tmp/$name.out"; then
      url=$(grep -o 'http://[0-9.]*:[0-9]*' "$tmp/$name.out")
      return 0
    fi
    kill -0 "${pids[-1]}" 2> /dev/null || break
    sleep 0.1
  done
  echo "bench-pd-kv: $name did not start:" >&2
  cat "$tmp/$name.err" >&2
  exit 1
}

stop_nodes() {
  for p in "${pids[@]}"; do kill -TERM "$p" 2> /dev/null || true; done
  for p in "${pids[@]}"; do wait "$p" 2> /dev/null || true; done
  pids=()
}

metrics() {
  curl -sf "$1/metrics" | grep '^tessera_pd_' | tr '\n' ';'
}

max_len=0
for l in $LENGTHS; do [ "$l" -gt "$max_len" ] && max_len=$l; done
"$B" synth --shape stories110M --seed 1 --max-seq-len $((max_len + 64)) --out "$tmp/s110.bin" \
  --tokenizer-out "$tmp/s110.tok.bin" 2> "$tmp/synth.txt"
staging=$(((max_len + 64) * 12 * 2 * 768 * 4 / 1048576 + 16))

{
  echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  echo "commit: $(git rev-parse --short HEAD 2> /dev/null || echo unknown)"
  echo "cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //') x $(nproc)"
  echo "kernel: $(uname -r)"
  echo "model: $(cat "$tmp/synth.txt")"
  echo "backends: prefill $PREFILL_BACKEND, decode $DECODE_BACKEND"
  echo "lengths: $LENGTHS; repeats: $REPEATS ($LONG_REPEATS above 1024 tokens); links: $LINKS; overlaps: $OVERLAPS; prefill chunk: $CHUNK tokens"
} > "$OUT/env.txt"
: > "$OUT/raw.jsonl"

for link in $LINKS; do
  # The ceiling: the bare link at the per-layer write size of a full chunk (K or V rows of CHUNK tokens).
  write_bytes=$((CHUNK * 768 * 4))
  echo "link $link ceiling (uptime: $(uptime | sed 's/.*load average: //'))" >&2
  taskset -c 0,1 "$B" link bench --endpoint "$link" --sizes "$write_bytes" --repeats 3 --seconds 0.5 \
    > "$OUT/link-$link.txt" 2>&1 || echo "bench-pd-kv: link bench $link failed (see $OUT/link-$link.txt)" >&2
  for overlap in $OVERLAPS; do
    start_node "prefill-$link-$overlap" 0 "$PREFILL_BACKEND" --role prefill --pd-overlap "$overlap" --link-endpoints "$link"
    P=$url
    start_node "decode-$link-$overlap" 1 "$DECODE_BACKEND" --role decode --prefill-nodes "$P" --link-endpoints "$link" \
      --pd-min-tokens 1 --pd-staging-mib "$staging" --pd-timeout-ms 900000
    D=$url
    # One warm-up request (first connection, page faults), not recorded.
    "$B" bench serve --url "$D" --input-len 64 --output-len 1 --num-prompts 1 --seed 999 > /dev/null
    for len in $LENGTHS; do
      reps=$REPEATS
      [ "$len" -gt 1024 ] && reps=$LONG_REPEATS
      for r in $(seq "$reps"); do
        load=$(cut -d' ' -f1 /proc/loadavg)
        before=$(metrics "$D")
        "$B" bench serve --url "$D" --input-len "$len" --output-len 1 --num-prompts 1 --seed "$((len * 100 + r))" \
          --timeout 900 --out "$tmp/run.json" > /dev/null
        after=$(metrics "$D")
        node -e '
          const [run, before, after, link, overlap, len, rep, load] = process.argv.slice(1);
          const j = JSON.parse(require("fs").readFileSync(run, "utf8"));
          const parse = (s) => Object.fromEntries(s.split(";").filter(Boolean).map((l) => {
            const i = l.lastIndexOf(" "); return [l.slice(0, i), Number(l.slice(i + 1))]; }));
          const b = parse(before), a = parse(after);
          const d = (k) => (a[k] || 0) - (b[k] || 0);
          console.log(JSON.stringify({link, overlap, prompt_tokens: Number(len), repeat: Number(rep),
            load_1min: Number(load), completed: j.completed, ttft_ms: j.ttfts[0] * 1000,
            remote: d("tessera_pd_requests_total{path=\"remote\"}"), kv_bytes: d("tessera_pd_kv_bytes_total"),
            handoff_ms: d("tessera_pd_transfer_seconds_total") * 1000,
            compute_ms: d("tessera_pd_prefill_compute_seconds_total") * 1000,
            kv_exposed_ms: d("tessera_pd_kv_exposed_seconds_total") * 1000,
            kv_active_ms: d("tessera_pd_kv_active_seconds_total") * 1000,
            kv_verify_ms: d("tessera_pd_kv_verify_seconds_total") * 1000}));
        ' "$tmp/run.json" "$before" "$after" "$link" "$overlap" "$len" "$r" "$load" | tee -a "$OUT/raw.jsonl" >&2
      done
    done
    stop_nodes
  done
done

node - "$OUT" > "$OUT/summary.md" << 'JS'
const fs = require('fs');
const dir = process.argv[2];
const rows = fs.readFileSync(`${dir}/raw.jsonl`, 'utf8').split('\n').filter(Boolean).map((l) => JSON.parse(l));
const med = (v) => { const s = [...v].sort((a, b) => a - b); const n = s.length;
  return n % 2 ? s[(n - 1) / 2] : (s[n / 2 - 1] + s[n / 2]) / 2; };
const f = (x, d = 0) => x.toFixed(d);
const groups = new Map();
for (const r of rows) {
  const k = `${r.link}|${r.overlap}|${r.prompt_tokens}`;
  if (!groups.has(k)) groups.set(k, []);
  groups.get(k).push(r);
}
console.log('| link | overlap | prompt tokens | KV MiB | TTFT ms | prefill compute ms | KV wire exposed ms | KV receive ms | KV share of TTFT | KV wire active ms | MiB/s while active | runs | load |');
console.log('| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |');
for (const [k, g] of groups) {
  const [link, overlap, len] = k.split('|');
  const share = g.map((r) => (r.kv_exposed_ms + r.kv_verify_ms) / r.ttft_ms);
  const mib = g[0].kv_bytes / Math.max(1, g[0].remote) / 1048576;
  const rate = g.map((r) => (r.kv_bytes / Math.max(1, r.remote) / 1048576) / (r.kv_active_ms / 1000));
  const rng = (v, d = 0) => `${f(med(v), d)} (${f(Math.min(...v), d)}-${f(Math.max(...v), d)})`;
  const remote = g.reduce((s, r) => s + r.remote, 0);
  const loads = g.map((r) => r.load_1min);
  console.log(`| ${link} | ${overlap} | ${len} | ${f(mib, 1)} | ${rng(g.map((r) => r.ttft_ms))} | ` +
    `${rng(g.map((r) => r.compute_ms))} | ${rng(g.map((r) => r.kv_exposed_ms), 1)} | ` +
    `${rng(g.map((r) => r.kv_verify_ms), 1)} | ` +
    `${f(100 * med(share), 1)}% (${f(100 * Math.min(...share), 1)}-${f(100 * Math.max(...share), 1)}) | ` +
    `${rng(g.map((r) => r.kv_active_ms), 1)} | ${f(med(rate))} | ${g.length}${remote === g.length ? '' : ` (${remote} remote!)`} | ` +
    `${f(Math.min(...loads), 1)}-${f(Math.max(...loads), 1)} |`);
}
JS
cat "$OUT/summary.md"
