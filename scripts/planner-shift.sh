#!/usr/bin/env bash
# The planner's workload-shift run (issue 18, docs/solver.md "Workload shift"): `tessera up` with 3 nodes of
# a synthetic stories15M (f16 GGUF, seed 1, 512 positions; `tessera synth`) on this machine's 2 CPUs, one
# thread each (node-0 and node-2 pinned to CPU 0, node-1 to CPU 1), starting as 1 prefill (node-0) + 2 decode: a placement
# for short prompts and long answers. `tessera fault-load` sends a short-prompt / long-answer phase (about 58
# prompt tokens, 200 generated), then a long-prompt / short-answer phase (about 365 prompt tokens, 4
# generated), where the single 1-thread prefill node queues every prompt while CPU 1 (the decode node-1) sits
# nearly idle. With the planner on, the placement should change within 30 s of the shift; goodput (requests
# within the SLO, per second) over the second phase is compared with the same run with the planner off. Every
# request is checked token by token against a reference (the fault suite's accounting: lost, repeated,
# mismatched tokens); a request that differs is printed with its timing, its prefill node and the role changes
# around it.
#
#   scripts/planner-shift.sh [RUNS]        (default 3 runs with the planner on, 3 with it off, interleaved)
#   env: WEIGHTS (f16, the default, or f32), P1_REQUESTS / P2_REQUESTS (per client and phase), CLIENTS,
#        SLO_TTFT_MS, SLO_TPOT_MS,
#        START (1p2d, 2p1d or both), MODES ("off on"), BIN (default build/release/bin/tessera),
#        OUT (a folder kept with every run's JSON and logs)
set -euo pipefail
cd "$(dirname "$0")/.."
runs="${1:-3}"
bin="${BIN:-build/release/bin/tessera}"
clients="${CLIENTS:-4}"
# The SLO (docs/solver.md): the first token within 300 ms, then on average one token per 50 ms.
ttft="${SLO_TTFT_MS:-300}"
tpot="${SLO_TPOT_MS:-50}"
# Requests per client per phase (closed loop: each client sends its next request when the last is done).
p1_requests="${P1_REQUESTS:-25}"
p2_requests="${P2_REQUESTS:-150}"
p1_tokens=200 p1_words=0 p2_tokens=4 p2_words=60
out="${OUT:-$(mktemp -d /tmp/planner-shift.XXXXXX)}"
mkdir -p "$out"
out=$(cd "$out" && pwd)
[ -x "$bin" ] || { echo "planner-shift: build first (bash scripts/build release)" >&2; exit 1; }
bin=$(realpath "$bin")
# f16 weights by default: the cpu backend computes every row of an f16 matmul in the same order whatever the
# batch (CpuMatMul's bitwise test), so a stream's tokens do not depend on what shares its engine steps; with f32 weights a step of 16 rows
# or more (a prompt chunk beside the decodes, which `both` nodes run) goes to sgemm, whose rounding differs
# from the decode-only kernel's, and a near tie in greedy decoding can then flip (docs/solver.md).
weights="${WEIGHTS:-f16}"
case "$weights" in
  f16) model="$out/s15-f16.gguf" tok="" wbytes=2
    [ -f "$model" ] || "$bin" synth --shape stories15M --seed 1 --max-seq-len 512 --format gguf --dtype f16 \
      --out "$model" >"$out/synth.log" 2>&1 ;;
  f32) model="$out/s15.bin" tok="$out/s15.tok.bin" wbytes=4
    [ -f "$model" ] || "$bin" synth --shape stories15M --seed 1 --max-seq-len 512 --out "$model" \
      --tokenizer-out "$tok" >"$out/synth.log" 2>&1 ;;
  *) echo "planner-shift: WEIGHTS is f16 or f32, not '$weights'" >&2; exit 2 ;;
esac
tokflag=() tokline=""
if [ -n "$tok" ]; then tokflag=(--tokenizer "$tok"); tokline="tokenizer: $tok"; fi
served=$(basename "$model")  # `tessera up` names the model after its file

# The planner's inputs: a measured profile of one CPU thread (decode steps and prefill read off its points),
# the fleet (one pool of 3 nodes) with the serving overheads scripts/solver-validate.sh calibrated for this
# model and backend on this machine (docs/bench/solver-validate: every run's request-overhead samples pooled,
# the medians of its per-token, stream-start and colocated-slowdown constants), the model, the SLO.
[ -f "$out/cpu.yaml" ] || taskset -c 1 "$bin" profile --model "$model" "${tokflag[@]}" --backend cpu --threads 1 \
  --family cpu --memory-gb 1 --max-tokens 480 --max-batch 16 --repeats 3 --prefill-export --out "$out/cpu.yaml" \
  >"$out/profile.log" 2>&1
overheads=$(python3 - docs/bench/solver-validate <<'PY'
import glob, re, statistics, sys
idle, busy, tok, start, slow = [], [], [], [], []
for f in sorted(glob.glob(sys.argv[1] + "/*/fleet.yaml")):
    t = open(f).read()
    idle += re.search(r"request_overhead_samples_ms: \[([^\]]*)\]", t).group(1).split(",")
    busy += re.search(r"request_overhead_busy_samples_ms: \[([^\]]*)\]", t).group(1).split(",")
    tok.append(float(re.search(r"token_overhead_ms: ([\d.]+)", t).group(1)))
    start.append(float(re.search(r"stream_start_overhead_ms: ([\d.]+)", t).group(1)))
    slow.append(float(re.search(r"colocated_slowdown: ([\d.]+)", t).group(1)))
if not tok:
    sys.exit("planner-shift: no calibrated fleets in " + sys.argv[1] + " (run scripts/solver-validate.sh)")
print("request_overhead_samples_ms: [" + ",".join(x.strip() for x in idle) + "]")
print("request_overhead_busy_samples_ms: [" + ",".join(x.strip() for x in busy) + "]")
print(f"token_overhead_ms: {statistics.median(tok):.4f}")
print(f"stream_start_overhead_ms: {statistics.median(start):.3f}")
print(f"colocated_slowdown: {statistics.median(slow):.4f}")
PY
)
cat >"$out/fleet.yaml" <<EOF
token_budget: 256
$overheads
pools:
  - {name: cpu, count: 3, cost_per_hour: 1, profile: cpu.yaml, batch_limits: [64], decode_points: true,
     prefill_points: true, launch: {backend: cpu, threads: 1}}
EOF
cat >"$out/workload.yaml" <<EOF
model: {shape: stories15M, max_seq_len: 512, weight_bytes: $wbytes, kv_bytes: 2, path: $model}
rate: 1
input: {fixed: 64}
output: {fixed: 64}
EOF
printf 'ttft_ms: %s\ntpot_ms: %s\npercentile: 90\nattainment: 0.9\n' "$ttft" "$tpot" >"$out/slo.yaml"

# The starting placement: START=1p2d (the default), 2p1d, or both (3 colocated nodes).
case "${START:-1p2d}" in
  both) r0=both r1=both r2=both ;;
  2p1d) r0=prefill r1=prefill r2=decode ;;
  *) r0=prefill r1=decode r2=decode ;;
esac
cluster() {  # $1: on|off
  cat >"$out/cluster-$1.yaml" <<EOF
model: $model
$tokline
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

# check_reference REF PHASE_JSON FLAG: a reference is only as good as its run; one with failed requests is
# removed (and the script stops) rather than compared with.
check_reference() {
  [ "$3" = --write-reference ] || return 0
  python3 -c 'import json,sys; sys.exit(json.load(open(sys.argv[1]))["failed"] != 0)' "$2" && return 0
  rm -f "$1"
  echo "planner-shift: the reference run had failed requests ($2); $1 not kept" >&2
  exit 1
}

one_run() {  # $1: on|off, $2: run number
  local mode="$1" k="$2" dir="$out/$1-$2"
  mkdir -p "$dir"
  uptime >"$dir/uptime.txt"
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
  "$bin" fault-load --url "$url" --model "$served" --clients "$clients" --requests "$p1_requests" \
    --max-tokens "$p1_tokens" --cluster-token-file "$token" \
    --prompt-words "$p1_words" --slo-ttft-ms "$ttft" --slo-tpot-ms "$tpot" "${r1[@]}" >"$dir/phase1.json"
  check_reference "$ref1" "$dir/phase1.json" "${r1[0]}"
  local shift_ms
  shift_ms=$(now_ms)
  "$bin" fault-load --url "$url" --model "$served" --clients "$clients" --requests "$p2_requests" \
    --max-tokens "$p2_tokens" --cluster-token-file "$token" \
    --prompt-words "$p2_words" --slo-ttft-ms "$ttft" --slo-tpot-ms "$tpot" "${r2[@]}" >"$dir/phase2.json"
  check_reference "$ref2" "$dir/phase2.json" "${r2[0]}"
  # Each node's counters at the end (which node computed how many prompts, and decoded how many requests).
  grep -o 'node-[0-9] ([a-z]*, [a-z]*) at http://[0-9.:]*' "$dir/up.err" | while read -r name _ _ _ nurl; do
    echo "== $name $nurl"
    curl -sS -m 5 -H "x-tessera-cluster-token: $(cat "$token")" "$nurl/metrics" |
      grep -E '^tessera_(requests_total|prompt_tokens_total|generation_tokens_total|pd_requests_total)' || true
  done >"$dir/nodes.txt" 2>&1
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
       "p2_ttft_p50_ms": p2["ttft"].get("p50_ms"), "p2_tpot_p50_ms": p2["tpot"].get("p50_ms"),
       "load": open(f"{d}/uptime.txt").read().split("load average:")[-1].strip()}
print(json.dumps(row))
# A request whose tokens differ from the reference: its path, its timing, and the role changes around it.
for phase, p in (("phase 1", p1), ("phase 2", p2)):
    for x in p.get("differing", []):
        t0, t1 = x["start_unix_ms"], x["end_unix_ms"] or x["start_unix_ms"]
        near = [a for a in acts if t0 - 10000 <= a["ts_ms"] <= t1 + 10000]
        changes = "; ".join(f"{a['node']} {a['from']}->{a['to']} at {(a['ts_ms'] - t0) / 1e3:+.2f} s" for a in near)
        print(f"planner-shift: {mode} run {k} {phase}: request {x['i']} (client {x['client']}) differs from the "
              f"reference from token {x['first_difference_at']} of {x['reference_tokens']} ({x['lost']} lost, "
              f"{x['repeated']} repeated); node {x['node'] or '?'}, prefill node {x['prefill_node'] or 'none'}; "
              f"sent {(t0 - shift) / 1e3:+.2f} s from the shift, first token "
              f"{((x['first_token_unix_ms'] or t0) - t0):.0f} ms later, lasted {t1 - t0:.0f} ms; "
              f"role changes within 10 s: {changes or 'none'}", file=sys.stderr)
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
