#!/usr/bin/env bash
# Validates the solver's simulator against a real local prefill/decode cluster (issue 9, must-show 1) and
# regenerates the validation table of docs/solver.md.
#
# For each workload: a seeded trace (Poisson arrivals, uniform length mix) is written twice, as the solver's
# CSV trace and as `tessera bench serve`'s JSON-lines trace; `tessera solve` plans a two-node cluster (a
# prefill pool on CPU 0 and a decode pool on CPU 1, both the cpu backend with one thread, profiled here by
# `tessera profile`) and predicts TTFT and TPOT p50/p90 on that trace; `tessera up` launches the plan and
# `tessera bench serve` replays the trace against it REPEATS times. The model is synthetic stories15M
# (seed 1). Machine load (`uptime`) is recorded before each run.
#
#   bash scripts/solver-validate.sh         # writes docs/bench/solver-validate/{table.md,*.json,*.yaml}
# Knobs: REPEATS (3), N (requests per run, 60), OUT (docs/bench/solver-validate).
# Unattended: every process it starts is stopped on exit, also on failure or Ctrl-C.
set -euo pipefail
cd "$(dirname "$0")/.."
B=$PWD/build/release/bin/tessera
REPEATS=${REPEATS:-3}
N=${N:-60}
OUT=${OUT:-docs/bench/solver-validate}
[ -x "$B" ] || { echo "build first: bash scripts/build release" >&2; exit 1; }
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
tmp=$(mktemp -d)
up_pid=""
cleanup() {
  if [ -n "$up_pid" ] && kill -0 "$up_pid" 2>/dev/null; then
    kill -TERM "$up_pid" 2>/dev/null || true
    wait "$up_pid" 2>/dev/null || true
  fi
  rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# name, rate (req/s), input range, output range. max_seq_len of stories15M is 256.
WORKLOADS=(
  "chat 1.5 32:96 32:96"
  "long-prompt 2.0 150:220 8:24"
  "long-output 0.7 8:32 96:160"
)

echo "solver-validate: synthetic stories15M, profile (cpu, 1 thread, pinned to CPU 0)" >&2
$B synth --shape stories15M --seed 1 --out "$tmp/s15.bin" --tokenizer-out "$tmp/s15.tok.bin" >/dev/null 2>&1
uptime > "$OUT/uptime-profile.txt"
taskset -c 0 "$B" profile --model "$tmp/s15.bin" --tokenizer "$tmp/s15.tok.bin" --backend cpu --threads 1 \
  --memory-gb 1 --network-gb-s 1 --max-tokens 255 --max-batch 16 --repeats 5 --out "$OUT/cpu-profile.yaml" >&2

cat > "$tmp/fleet.yaml" <<EOF
token_budget: 256
pools:
  - {name: pre, count: 1, cost_per_hour: 1, profile: $OUT/cpu-profile.yaml, roles: [prefill], batch_limits: [64],
     launch: {backend: cpu, threads: 1, cpus: [0], args: [--no-prefix-cache]}}
  - {name: dec, count: 1, cost_per_hour: 1, profile: $OUT/cpu-profile.yaml, roles: [decode], batch_limits: [64],
     launch: {backend: cpu, threads: 1, cpus: [1], args: [--no-prefix-cache]}}
EOF
echo "ttft_ms: 10000
tpot_ms: 1000" > "$tmp/slo.yaml"

for w in "${WORKLOADS[@]}"; do
  read -r name rate inr outr <<<"$w"
  python3 - "$tmp/$name" "$rate" "$inr" "$outr" "$N" <<'PY'
import random, sys, json
base, rate, inr, outr, n = sys.argv[1], float(sys.argv[2]), sys.argv[3], sys.argv[4], int(sys.argv[5])
lo_i, hi_i = map(int, inr.split(":")); lo_o, hi_o = map(int, outr.split(":"))
rng = random.Random(7)
t = 0.0
with open(base + ".csv", "w") as c, open(base + ".jsonl", "w") as j:
    for k in range(n):
        if k: t += rng.expovariate(rate)
        i, o = rng.randint(lo_i, hi_i), rng.randint(lo_o, hi_o)
        c.write(f"{t:.6f},{i},{o}\n")
        j.write(json.dumps({"timestamp": round(t, 6), "input_len": i, "output_len": o}) + "\n")
PY
  cat > "$tmp/$name.yaml" <<EOF
model: {shape: stories15M, weight_bytes: 4, kv_bytes: 4, path: $tmp/s15.bin, tokenizer: $tmp/s15.tok.bin}
trace: $tmp/$name.csv
EOF
  "$B" solve --fleet "$tmp/fleet.yaml" --workload "$tmp/$name.yaml" --slo "$tmp/slo.yaml" \
    --out "$OUT/$name-plan.yaml" > "$OUT/$name-solve.txt"
  for r in $(seq "$REPEATS"); do
    uptime > "$OUT/$name-r$r-uptime.txt"
    "$B" up "$OUT/$name-plan.yaml" --port 0 > "$tmp/up.out" 2> "$tmp/up.err" &
    up_pid=$!
    for _ in $(seq 600); do grep -q "cluster ready" "$tmp/up.out" && break; kill -0 "$up_pid" || break; sleep 0.1; done
    url=$(grep -o 'http://[0-9.]*:[0-9]*' "$tmp/up.out" | head -1)
    [ -n "$url" ] || { cat "$tmp/up.err" >&2; exit 1; }
    echo "solver-validate: $name run $r at $url ($(cut -d, -f3- "$OUT/$name-r$r-uptime.txt" | xargs))" >&2
    "$B" bench serve --url "$url" --dataset "trace:$tmp/$name.jsonl" --num-prompts "$N" --seed "$r" \
      --out "$OUT/$name-r$r.json" >&2
    kill -TERM "$up_pid"
    wait "$up_pid" || true
    up_pid=""
  done
done

python3 - "$OUT" "$REPEATS" "${WORKLOADS[@]}" > "$OUT/table.md" <<'PY'
import json, re, sys, statistics
out, reps, wls = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
def predicted(name):
    text = open(f"{out}/{name}-plan.yaml").read()
    pr = text[text.index("predicted:"):]
    get = lambda key: {k: float(v) for k, v in re.findall(r"(p\d+): ([\d.]+)", re.search(key + r": \{([^}]*)\}", pr).group(1))}
    return get("ttft_ms"), get("tpot_ms")
print("| workload | rate | input | output | metric | predicted ms | measured ms (runs) | error % (runs) | load avg (1 min) |")
print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
worst = 0.0
for w in wls:
    name, rate, inr, outr = w.split()
    ttft, tpot = predicted(name)
    runs = [json.load(open(f"{out}/{name}-r{r}.json")) for r in range(1, reps + 1)]
    loads = [open(f"{out}/{name}-r{r}-uptime.txt").read().split("load average:")[1].split(",")[0].strip() for r in range(1, reps + 1)]
    for metric, pred in (("ttft", ttft), ("tpot", tpot)):
        for q in ("p50", "p90"):
            key = ("median" if q == "p50" else q) + f"_{metric}_ms"
            meas = [run[key] for run in runs]
            errs = [(pred[q] - m) / m * 100 for m in meas]
            med = statistics.median(meas)
            worst = max(worst, abs((pred[q] - med) / med * 100))
            print(f"| {name} | {rate}/s | {inr.replace(':', '-')} | {outr.replace(':', '-')} | {metric.upper()} {q} | "
                  f"{pred[q]:.1f} | {med:.1f} ({', '.join(f'{m:.1f}' for m in meas)}) | "
                  f"{(pred[q] - med) / med * 100:+.0f} ({', '.join(f'{e:+.0f}' for e in errs)}) | {', '.join(loads)} |")
print(f"\nLargest |error| against the median of the runs: {worst:.0f}%.")
PY
cat "$OUT/table.md"
