#!/usr/bin/env bash
# The matched end-to-end benchmark (docs/bench/e2e/README.md): the same model and workloads on
#   colocated  two `--role both` nodes (cpu backend), one per CPU, behind the router
#   pd-cpu     prefill node (cpu, CPU 0) -> decode node (cpu, CPU 1), behind the router
#   pd-opencl  prefill node (cpu, CPU 0) -> decode node (opencl, CPU 1), behind the router
# Every node gets one CPU (sched_setaffinity through `tessera up`'s `cpus:`) and one compute thread, so each
# setup has the same 2 cores. Two workloads: long input / short output and short input / long output,
# Poisson arrivals swept over request rates, REPEATS runs per point. Raw JSON, plots and tables go to
# docs/bench/e2e/; the README there is written by hand from them.
#   bash scripts/bench-e2e.sh          # ~20-25 minutes on the 2-core development VM
# Knobs: REPEATS (2), NUM_PROMPTS (12), LISO ("768 192": input output), SILO ("128 384"),
#        LISO_RATES ("0.5,1,2"), SILO_RATES ("0.5,1,2"), SETUPS ("colocated pd-cpu pd-opencl"),
#        OUT (docs/bench/e2e).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
B=$ROOT/build/release/bin/tessera
REPEATS=${REPEATS:-2}
NUM_PROMPTS=${NUM_PROMPTS:-12}
LISO=${LISO:-"768 192"}
SILO=${SILO:-"128 384"}
LISO_RATES=${LISO_RATES:-"0.5,1,2"}
SILO_RATES=${SILO_RATES:-"0.5,1,2"}
SETUPS=${SETUPS:-"colocated pd-cpu pd-opencl"}
OUT=${OUT:-docs/bench/e2e}
SEQ=1024

die() {
  echo "bench-e2e: $*" >&2
  exit 1
}
[ -x "$B" ] || die "$B missing; run: bash scripts/build release"
command -v node > /dev/null || die "node is needed for the KV-share summary"
[ "$(nproc)" -ge 2 ] || die "needs 2 CPUs (one per node)"
mkdir -p "$OUT/liso" "$OUT/silo"
tmp=$(mktemp -d)
up_pid=
cleanup() {
  if [ -n "$up_pid" ]; then
    kill -TERM "$up_pid" 2> /dev/null || true
    wait "$up_pid" 2> /dev/null || true
  fi
  rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 130' INT TERM
# PoCL: one worker thread (the node is pinned to one CPU anyway).
export POCL_MAX_PTHREAD_COUNT=1

"$B" synth --shape stories15M --seed 1 --max-seq-len "$SEQ" --out "$tmp/s15.bin" --tokenizer-out "$tmp/s15.tok.bin" \
  2> "$tmp/synth.txt" || die "synth failed: $(cat "$tmp/synth.txt")"
if [[ " $SETUPS " == *" pd-opencl "* ]] && ! "$B" generate --model "$tmp/s15.bin" --tokenizer "$tmp/s15.tok.bin" \
  --backend opencl --max-tokens 1 --quiet > /dev/null 2> "$tmp/opencl.txt"; then
  die "no usable OpenCL device for pd-opencl ($(tail -1 "$tmp/opencl.txt")); run with SETUPS=\"colocated pd-cpu\""
fi

# env.txt gets one block per invocation (a rerun of one setup appends its own; a full run starts afresh).
if [ "$SETUPS" = "colocated pd-cpu pd-opencl" ]; then : > "$OUT/env.txt"; fi
{
  echo "== run of setups: $SETUPS"
  echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  echo "commit: $(git rev-parse --short HEAD 2> /dev/null || echo unknown)$(git diff --quiet 2> /dev/null || echo ' (modified)')"
  echo "cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //') x $(nproc); memory: $(free -g | awk '/Mem:/ {print $2}') GiB"
  echo "kernel: $(uname -r); os: $(. /etc/os-release && echo "$PRETTY_NAME")"
  echo "compiler: $(c++ --version | head -1)"
  echo "libraries: $(dpkg-query -W -f '${Package} ${Version}; ' pocl-opencl-icd libpocl2 ocl-icd-libopencl1 2> /dev/null)"
  echo "opencl device: $(clinfo -l 2> /dev/null | tr -s ' ' | tr '\n' ' ' || echo unknown)"
  echo "model: $(cat "$tmp/synth.txt")"
  echo "weights f32, KV cache f32 on every node, KV wire dtype f32, block 16 tokens, prefill chunk 512 tokens"
  echo "workloads: liso $LISO (rates $LISO_RATES), silo $SILO (rates $SILO_RATES); fixed lengths, Poisson arrivals"
  echo "num_prompts $NUM_PROMPTS per run, $REPEATS runs per point, a fresh workload seed per run (listed in each sweep index)"
  echo "uptime at start: $(uptime)"
} >> "$OUT/env.txt"

# spec SETUP: the `tessera up` cluster spec of a setup.
spec() {
  local common='args: [--max-batch-tokens, "512", --max-num-seqs, "32", --kv-memory, "256"]'
  echo "model: $tmp/s15.bin"
  echo "tokenizer: $tmp/s15.tok.bin"
  echo "chat_template: plain"
  # Generous health probes: a node pinned to one busy core can take seconds to answer /health, and an
  # ejected node's in-flight streams are cancelled.
  echo "router: {port: 0, strategy: round_robin, args: [--probe-timeout-ms, \"5000\", --unhealthy-threshold, \"5\"]}"
  echo "nodes:"
  case "$1" in
    colocated)
      echo "  - {name: node-0, role: both, backend: cpu, threads: 1, cpus: [0], $common}"
      echo "  - {name: node-1, role: both, backend: cpu, threads: 1, cpus: [1], $common}"
      ;;
    pd-cpu | pd-opencl)
      local decode_backend=cpu
      [ "$1" = pd-opencl ] && decode_backend=opencl
      echo "  - {name: prefill-0, role: prefill, backend: cpu, threads: 1, cpus: [0], $common}"
      echo "  - {name: decode-0, role: decode, backend: $decode_backend, threads: 1, cpus: [1], args: [--max-batch-tokens, \"512\", --max-num-seqs, \"32\", --kv-memory, \"256\", --pd-staging-mib, \"256\"]}"
      ;;
    *) die "unknown setup $1" ;;
  esac
}

# Prints the decode node's PD counters (tessera_pd_*), one per line.
pd_metrics() { curl -sf "$1/metrics" | grep '^tessera_pd_' || true; }

for setup in $SETUPS; do
  spec "$setup" > "$tmp/$setup.yaml"
  "$B" up "$tmp/$setup.yaml" --port 0 > "$tmp/up.out" 2> "$tmp/up.err" &
  up_pid=$!
  for _ in $(seq 600); do
    grep -q "cluster ready" "$tmp/up.out" && break
    kill -0 "$up_pid" 2> /dev/null || die "tessera up ($setup) exited: $(tail -5 "$tmp/up.err")"
    sleep 0.2
  done
  grep -q "cluster ready" "$tmp/up.out" || die "tessera up ($setup) not ready after 120 s: $(tail -5 "$tmp/up.err")"
  url=$(grep -o 'http://[0-9.]*:[0-9]*' "$tmp/up.out" | head -1)
  decode_url=$(grep -o 'decode-0 (decode, [a-z]*) at http://[0-9.]*:[0-9]*' "$tmp/up.err" | grep -o 'http://.*' || true)
  echo "== $setup at $url (uptime: $(uptime | sed 's/.*load average: //'))" >&2
  echo "$setup started: $(uptime)" >> "$OUT/env.txt"
  # Warm-up (first OpenCL kernels, first link connection, page faults): not recorded.
  "$B" bench serve --url "$url" --input-len 200 --output-len 8 --num-prompts 2 --seed 999 > /dev/null
  for wl in liso silo; do
    if [ "$wl" = liso ]; then read -r in_len out_len <<< "$LISO"; rates=$LISO_RATES; else read -r in_len out_len <<< "$SILO"; rates=$SILO_RATES; fi
    [ -n "$decode_url" ] && pd_metrics "$decode_url" > "$tmp/before.txt"
    echo "-- $setup $wl: $in_len in / $out_len out at $rates req/s (uptime: $(uptime | sed 's/.*load average: //'))" >&2
    "$B" bench sweep --url "$url" --dataset fixed --input-len "$in_len" --output-len "$out_len" \
      --num-prompts "$NUM_PROMPTS" --request-rates "$rates" --repeats "$REPEATS" --seed 1 --timeout 900 \
      --label "$setup" --out-dir "$OUT/$wl" --no-plots >&2 || die "sweep $setup $wl failed"
    if [ -n "$decode_url" ]; then
      pd_metrics "$decode_url" > "$tmp/after.txt"
      node -e '
        const fs = require("fs");
        const [before, after, setup, wl, index] = process.argv.slice(1);
        const parse = (f) => Object.fromEntries(fs.readFileSync(f, "utf8").split("\n").filter(Boolean).map((l) => {
          const i = l.lastIndexOf(" "); return [l.slice(0, i), Number(l.slice(i + 1))]; }));
        const b = parse(before), a = parse(after);
        const d = (k) => (a[k] || 0) - (b[k] || 0);
        // Mean TTFT over every request of the sweep, from the saved reports.
        const idx = JSON.parse(fs.readFileSync(index, "utf8"));
        const dir = require("path").dirname(index);
        let ttft = 0, n = 0;
        for (const p of idx.points) for (const f of p.runs) {
          const j = JSON.parse(fs.readFileSync(`${dir}/${f}`, "utf8"));
          j.ttfts.forEach((t, i) => { if (!j.errors[i]) { ttft += t * 1000; n++; } });
        }
        const remote = d("tessera_pd_requests_total{path=\"remote\"}");
        const per = (k) => remote > 0 ? d(k) * 1000 / remote : 0;
        console.log(JSON.stringify({setup, workload: wl, requests: n, remote,
          local: d("tessera_pd_requests_total{path=\"local\"}"), fallback: d("tessera_pd_requests_total{path=\"fallback\"}"),
          kv_mib_per_request: remote > 0 ? d("tessera_pd_kv_bytes_total") / remote / 1048576 : 0,
          mean_ttft_ms: ttft / n, handoff_ms: per("tessera_pd_transfer_seconds_total"),
          prefill_compute_ms: per("tessera_pd_prefill_compute_seconds_total"),
          kv_exposed_ms: per("tessera_pd_kv_exposed_seconds_total"), kv_verify_ms: per("tessera_pd_kv_verify_seconds_total"),
          kv_share_of_mean_ttft: (per("tessera_pd_kv_exposed_seconds_total") + per("tessera_pd_kv_verify_seconds_total")) / (ttft / n)}));
      ' "$tmp/before.txt" "$tmp/after.txt" "$setup" "$wl" "$OUT/$wl/$setup-sweep.json" > "$OUT/$wl/$setup-kv.json"
    fi
  done
  kill -TERM "$up_pid"
  wait "$up_pid" || die "tessera up ($setup) did not stop cleanly: $(tail -5 "$tmp/up.err")"
  up_pid=
done

# Plots and tables over every setup with results in $OUT (a rerun of one setup, SETUPS=..., keeps the others).
: > "$OUT/kv-share.jsonl"
for wl in liso silo; do
  indexes=()
  for setup in colocated pd-cpu pd-opencl; do
    [ -f "$OUT/$wl/$setup-sweep.json" ] && indexes+=("$OUT/$wl/$setup-sweep.json")
    [ -f "$OUT/$wl/$setup-kv.json" ] && cat "$OUT/$wl/$setup-kv.json" >> "$OUT/kv-share.jsonl"
  done
  "$B" bench plot "${indexes[@]}" --out-dir "$OUT/$wl" > /dev/null
done
echo "uptime at end: $(uptime)" >> "$OUT/env.txt"
echo >> "$OUT/env.txt"
{
  for wl in liso silo; do
    echo "### $wl"
    echo
    cat "$OUT/$wl/summary.md"
  done
  if [ -s "$OUT/kv-share.jsonl" ]; then
    echo "### KV transfer share (PD setups, means per remote request over each whole sweep)"
    echo
    echo "| setup | workload | remote / local / fallback | KV MiB per request | mean TTFT ms | prefill compute ms | KV exposed ms | KV receive ms | KV share of mean TTFT |"
    echo "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"
    node -e '
      for (const l of require("fs").readFileSync(process.argv[1], "utf8").split("\n").filter(Boolean)) {
        const r = JSON.parse(l);
        console.log(`| ${r.setup} | ${r.workload} | ${r.remote} / ${r.local} / ${r.fallback} | ${r.kv_mib_per_request.toFixed(1)} | ` +
          `${r.mean_ttft_ms.toFixed(0)} | ${r.prefill_compute_ms.toFixed(0)} | ${r.kv_exposed_ms.toFixed(1)} | ` +
          `${r.kv_verify_ms.toFixed(1)} | ${(100 * r.kv_share_of_mean_ttft).toFixed(2)}% |`);
      }' "$OUT/kv-share.jsonl"
  fi
} > "$OUT/results.md"
cat "$OUT/results.md"
