#!/usr/bin/env bash
# The planner's workload-shift run (issue 18, docs/solver.md "Workload shift"): `tessera up` with 3 nodes of
# stories260K on this machine's CPUs, starting as 2 prefill + 1 decode (a placement for long prompts);
# `tessera fault-load` sends a long-prompt / short-answer phase (about 390 prompt tokens, 4 generated), then a
# short-prompt / long-answer phase (about 20 prompt tokens, 200 generated). With the planner on, the
# placement should change within 30 s of the shift; goodput (requests within the SLO, per second) over the
# second phase is compared with the same run with the planner off. Every request is checked token by token
# against a reference (the fault suite's accounting: lost, repeated, mismatched tokens).
#
#   scripts/planner-shift.sh [RUNS]        (default 3 runs with the planner on, 3 with it off, interleaved)
#   env: P1_REQUESTS / P2_REQUESTS (per client and phase), CLIENTS, SLO_TTFT_MS, SLO_TPOT_MS,
#        START (2p1d, 1p2d or both), MODES ("off on"), BIN (default build/release/bin/tessera),
#        OUT (a folder kept with every run's JSON and logs)
set -euo pipefail
cd "$(dirname "$0")/.."
runs="${1:-3}"
bin="${BIN:-build/release/bin/tessera}"
clients="${CLIENTS:-6}"
ttft="${SLO_TTFT_MS:-250}"
tpot="${SLO_TPOT_MS:-15}"
# Requests per client per phase (closed loop: each client sends its next request when the last is done).
p1_requests="${P1_REQUESTS:-60}"
p2_requests="${P2_REQUESTS:-300}"
p1_tokens=4 p1_words=180 p2_tokens=200 p2_words=0
out="${OUT:-$(mktemp -d /tmp/planner-shift.XXXXXX)}"
mkdir -p "$out"
model="$PWD/models/stories260K"
[ -x "$bin" ] || { echo "planner-shift: build first (bash scripts/build release)" >&2; exit 1; }

# The planner's inputs: a measured profile of one CPU thread, the fleet (one pool of 3 nodes), the model, the SLO.
"$bin" profile --model "$model" --backend cpu --threads 1 --memory-gb 1 --network-gb-s 1 --max-tokens 480 \
  --max-batch 8 --repeats 1 --out "$out/cpu.yaml" >"$out/profile.log" 2>&1
cat >"$out/fleet.yaml" <<EOF
pools:
  - {name: cpu, count: 3, cost_per_hour: 1, profile: cpu.yaml, batch_limits: [16], launch: {backend: cpu, threads: 1}}
request_overhead_ms: 3
token_overhead_ms: 0.3
colocated_slowdown: 0.3
EOF
cat >"$out/workload.yaml" <<EOF
model: {name: stories260K, dim: 64, hidden_dim: 172, n_layers: 5, n_heads: 8, n_kv_heads: 4,
        vocab_size: 512, max_seq_len: 512, weight_bytes: 4, kv_bytes: 4, path: $model}
rate: 1
input: {fixed: 16}
output: {fixed: 16}
EOF
printf 'ttft_ms: %s\ntpot_ms: %s\npercentile: 90\nattainment: 0.9\n' "$ttft" "$tpot" >"$out/slo.yaml"

# The starting placement: START=2p1d (the default), 1p2d, or both (3 colocated nodes).
case "${START:-2p1d}" in
  both) r0=both r1=both r2=both ;;
  1p2d) r0=prefill r1=decode r2=decode ;;
  *) r0=prefill r1=prefill r2=decode ;;
esac
cluster() {  # $1: on|off
  cat >"$out/cluster-$1.yaml" <<EOF
model: $model
router: {port: 0}
nodes:
  - {name: node-0, role: $r0, backend: cpu, threads: 1, cpus: [0], args: [--pd-min-tokens, "1"]}
  - {name: node-1, role: $r1, backend: cpu, threads: 1, cpus: [1], args: [--pd-min-tokens, "1"]}
  - {name: node-2, role: $r2, backend: cpu, threads: 1, cpus: [0], args: [--pd-min-tokens, "1"]}
planner: {enabled: $([ "$1" = on ] && echo true || echo false), fleet: fleet.yaml, workload: workload.yaml,
          slo: slo.yaml, interval_s: 3, windows_to_act: 2, cooldown_s: 20, min_gain: 0.15, min_requests: 8}
EOF
}

now_ms() { date +%s%3N; }

one_run() {  # $1: on|off, $2: run number
  local mode="$1" k="$2" dir="$out/$1-$2"
  mkdir -p "$dir"
  cluster "$mode"
  "$bin" up "$out/cluster-$mode.yaml" --planner "$mode" >"$dir/up.out" 2>"$dir/up.err" &
  local up=$!
  for _ in $(seq 600); do grep -q "cluster ready" "$dir/up.out" 2>/dev/null && break; sleep 0.1; done
  grep -q "cluster ready" "$dir/up.out" || { echo "planner-shift: the cluster did not start" >&2; cat "$dir/up.err" >&2; kill $up; exit 1; }
  local url token planner
  url=$(grep -o 'OpenAI API at http://[0-9.:]*' "$dir/up.out" | sed 's/OpenAI API at //')
  planner=$(grep -o 'planner at http://[0-9.:]*' "$dir/up.out" | sed 's/planner at //' || true)
  token=$(grep -o 'logs in [^)]*' "$dir/up.out" | sed 's/logs in //')/cluster-token
  local ref1="$out/ref-phase1.jsonl" ref2="$out/ref-phase2.jsonl" r1=() r2=()
  if [ -f "$ref1" ]; then r1=(--reference "$ref1"); else r1=(--write-reference "$ref1"); fi
  if [ -f "$ref2" ]; then r2=(--reference "$ref2"); else r2=(--write-reference "$ref2"); fi
  "$bin" fault-load --url "$url" --clients "$clients" --requests "$p1_requests" --max-tokens "$p1_tokens" \
    --prompt-words "$p1_words" --slo-ttft-ms "$ttft" --slo-tpot-ms "$tpot" "${r1[@]}" >"$dir/phase1.json"
  local shift_ms
  shift_ms=$(now_ms)
  "$bin" fault-load --url "$url" --clients "$clients" --requests "$p2_requests" --max-tokens "$p2_tokens" \
    --prompt-words "$p2_words" --slo-ttft-ms "$ttft" --slo-tpot-ms "$tpot" "${r2[@]}" >"$dir/phase2.json"
  if [ -n "$planner" ]; then
    curl -sS -H "x-tessera-cluster-token: $(cat "$token")" "$planner/status" >"$dir/planner.json" || true
  else
    echo '{}' >"$dir/planner.json"
  fi
  kill -TERM $up
  wait $up || true
  python3 - "$dir" "$mode" "$k" "$shift_ms" <<'PY'
import json, sys
d, mode, k, shift = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
p1, p2 = (json.load(open(f"{d}/phase{i}.json")) for i in (1, 2))
pl = json.load(open(f"{d}/planner.json"))
acts = [x for x in pl.get("decisions", []) if x["action"] != "keep" and x["applied"]]
after = [x for x in acts if x["ts_ms"] >= shift]
change_s = (after[0]["ts_ms"] - shift) / 1e3 if after else None
row = {"mode": mode, "run": int(k), "goodput_rps": p2["goodput_rps"], "within_slo": p2["within_slo"],
       "phase2_requests": p2["sent"], "phase2_wall_s": p2["wall_s"], "phase1_goodput_rps": p1["goodput_rps"],
       "failed": p1["failed"] + p2["failed"],
       "lost": (p1["lost_tokens"] or 0) + (p2["lost_tokens"] or 0),
       "repeated": (p1["duplicated_tokens"] or 0) + (p2["duplicated_tokens"] or 0),
       "mismatched": (p1["mismatched_requests"] or 0) + (p2["mismatched_requests"] or 0),
       "actions_before_shift": len(acts) - len(after), "actions_after_shift": len(after),
       "placement_change_s": change_s,
       "changes": [f'{x["node"]} {x["from"]}->{x["to"]}' for x in after],
       "p2_ttft_p50_ms": p2["ttft"].get("p50_ms"), "p2_tpot_p50_ms": p2["tpot"].get("p50_ms")}
print(json.dumps(row))
PY
}

: >"$out/results.jsonl"
for k in $(seq "$runs"); do
  for mode in ${MODES:-off on}; do
    one_run "$mode" "$k" | tee -a "$out/results.jsonl"
  done
done
python3 - "$out/results.jsonl" "$ttft" "$tpot" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
def stats(mode):
    g = [r["goodput_rps"] for r in rows if r["mode"] == mode]
    return (statistics.mean(g), min(g), max(g), g) if g else None
on, off = stats("on"), stats("off")
print(f"SLO: TTFT <= {sys.argv[2]} ms and mean TPOT <= {sys.argv[3]} ms")
for name, s in (("planner on", on), ("planner off", off)):
    if s:
        print(f"{name}: phase-2 goodput mean {s[0]:.2f} req/s (min {s[1]:.2f}, max {s[2]:.2f}; runs {', '.join(f'{x:.2f}' for x in s[3])})")
if on and off and off[0] > 0:
    print(f"margin: {100 * (on[0] / off[0] - 1):+.0f}% (on vs off, means)")
ch = [r["placement_change_s"] for r in rows if r["mode"] == "on"]
print("placement change after the shift (s):", ", ".join("none" if c is None else f"{c:.1f}" for c in ch))
print("failed requests:", sum(r["failed"] for r in rows), " lost tokens:", sum(r["lost"] for r in rows),
      " repeated:", sum(r["repeated"] for r in rows), " mismatched requests:", sum(r["mismatched"] for r in rows))
PY
echo "planner-shift: results in $out"
