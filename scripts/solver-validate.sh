#!/usr/bin/env bash
# Validates the solver's simulator against a real local prefill/decode cluster (issue 9, must-show 1) and
# writes the validation table for docs/solver.md.
#
# The cluster: a prefill node pinned to CPU 0 and a decode node pinned to CPU 1 (cpu backend, one thread
# each), the router in front, all launched by `tessera up` from a plan of `tessera solve` (pools pinned to
# those roles). The model is synthetic stories15M (seed 1), f32. Each workload is a seeded trace (Poisson
# arrivals, uniform length mix), written both as the solver's CSV trace and as `tessera bench serve`'s
# JSON-lines trace, so the simulator and the cluster see the same requests.
#
# Each run (REPEATS per workload), in order, so that the profile sees the machine as the run does:
#   1. `tessera profile` on CPU 0 (with --prefill-export, as the prefill node runs) and on CPU 1 (the decode
#      node's CPU);
#   2. `tessera up` the plan;
#   3. calibration, on requests of its own (never the workloads' traces): 20 single requests with short answers
#      (16-token prompts, 8 tokens out, 0.25 s apart) and 20 with long ones (16 in, 128 out, 0.7 s apart).
#      Each request's TTFT above the simulator's prediction for it is one sample of the serving path overhead
#      (HTTP hops, JSON): the fleet's `request_overhead_samples_ms`, a distribution, not a constant. The
#      median TPOT above the predicted one, for short and for long answers, fitted as c_t + c_s / (out - 1),
#      gives `token_overhead_ms` (c_t: serving work per streamed token on the decode node's CPU, which the
#      simulator adds to each step per decoding sequence) and `stream_start_overhead_ms` (c_s: paid once per
#      stream in its first inter-token gap); and 7 rounds of a long request (16 in, 200 out) with 3 short
#      ones (16 in, 8 out) arriving while it decodes: their TTFT above the prediction is one sample each of
#      `request_overhead_busy_samples_ms`, the overhead when the decode node's CPU is busy with steps;
#   4. `tessera bench serve` replays the workload's trace; the cluster stops;
#   5. `tessera solve` predicts TTFT and TPOT p50/p90 on that trace from this run's profiles and overhead.
# Machine load (`uptime`) is recorded before each run.
#
#   bash scripts/solver-validate.sh      # writes $OUT/{table.md, per-run JSON, profiles, plans}
# Knobs: REPEATS (3), N (requests per workload run, 60), OUT (docs/bench/solver-validate).
# Unattended: every process it starts is stopped on exit, also on failure or Ctrl-C.
set -euo pipefail
cd "$(dirname "$0")/.."
B=$PWD/build/release/bin/tessera
REPEATS=${REPEATS:-3}
N=${N:-60}
OUT=${OUT:-docs/bench/solver-validate}
[ -x "$B" ] || { echo "build first: bash scripts/build release" >&2; exit 1; }
command -v python3 >/dev/null || { echo "python3 is needed (scripts/install-deps)" >&2; exit 1; }
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
tmp=$(mktemp -d)
up_pid=""
stop_cluster() {
  if [ -n "$up_pid" ] && kill -0 "$up_pid" 2>/dev/null; then
    kill -TERM "$up_pid" 2>/dev/null || true
    wait "$up_pid" 2>/dev/null || true
  fi
  up_pid=""
}
cleanup() { stop_cluster; rm -rf "$tmp"; }
trap cleanup EXIT
trap 'exit 130' INT TERM

# name, rate (req/s), input range, output range. stories15M's context is 256 positions.
WORKLOADS=(
  "chat 1.5 32:96 32:96"
  "long-prompt 2.0 150:220 8:24"
  "long-output 0.7 8:32 96:160"
)

# trace NAME RATE IN_RANGE OUT_RANGE N SPACING: writes NAME.csv (solver) and NAME.jsonl (bench); SPACING > 0
# spaces arrivals evenly instead of Poisson.
trace() {
  python3 - "$tmp/$1" "$2" "$3" "$4" "$5" "${6:-0}" <<'PY'
import json, random, sys
base, rate, inr, outr, n, spacing = sys.argv[1], float(sys.argv[2]), sys.argv[3], sys.argv[4], int(sys.argv[5]), float(sys.argv[6])
lo_i, hi_i = map(int, inr.split(":")); lo_o, hi_o = map(int, outr.split(":"))
rng = random.Random(7)
t = 0.0
with open(base + ".csv", "w") as c, open(base + ".jsonl", "w") as j:
    for k in range(n):
        if k: t += spacing if spacing > 0 else rng.expovariate(rate)
        i, o = rng.randint(lo_i, hi_i), rng.randint(lo_o, hi_o)
        c.write(f"{t:.6f},{i},{o}\n")
        j.write(json.dumps({"timestamp": round(t, 6), "input_len": i, "output_len": o}) + "\n")
PY
  cat > "$tmp/$1.yaml" <<EOF
model: {shape: stories15M, weight_bytes: 4, kv_bytes: 4, path: $tmp/s15.bin, tokenizer: $tmp/s15.tok.bin}
trace: $tmp/$1.csv
EOF
}

# rounds_trace NAME OFFSET:IN:OUT...: 7 rounds 1.2 s apart, each with a request per OFFSET:IN:OUT (seconds
# into the round, prompt and answer tokens).
rounds_trace() {
  local name=$1
  shift
  python3 - "$tmp/$name" "$@" <<'PY'
import json, sys
shape = [tuple(float(x) if k == 0 else int(x) for k, x in enumerate(s.split(":"))) for s in sys.argv[2:]]
with open(sys.argv[1] + ".csv", "w") as c, open(sys.argv[1] + ".jsonl", "w") as j:
    for r in range(7):
        for dt, inp, out in shape:
            t = round(1.2 * r + dt, 6)
            c.write(f"{t:.6f},{inp},{out}\n")
            j.write(json.dumps({"timestamp": t, "input_len": inp, "output_len": out}) + "\n")
PY
  cat > "$tmp/$name.yaml" <<EOF
model: {shape: stories15M, weight_bytes: 4, kv_bytes: 4, path: $tmp/s15.bin, tokenizer: $tmp/s15.tok.bin}
trace: $tmp/$name.csv
EOF
}

# fleet FILE OVERHEAD_YAML PROFILE_DIR: OVERHEAD_YAML is the fleet's serving-overhead keys, one line each
fleet() {
  cat > "$1" <<EOF
token_budget: 256
$2
pools:
  - {name: pre, count: 1, cost_per_hour: 1, profile: $3/cpu0.yaml, roles: [prefill], batch_limits: [64], decode_points: true, prefill_points: true,
     launch: {backend: cpu, threads: 1, cpus: [0], args: [--no-prefix-cache]}}
  - {name: dec, count: 1, cost_per_hour: 1, profile: $3/cpu1.yaml, roles: [decode], batch_limits: [64], decode_points: true, prefill_points: true,
     launch: {backend: cpu, threads: 1, cpus: [1], args: [--no-prefix-cache]}}
EOF
}

# predicted PLAN KEY QUANTILE: a latency (ms) from a plan's `predicted:` block.
predicted() {
  python3 - "$1" "$2" "$3" <<'PY'
import re, sys
text = open(sys.argv[1]).read()
block = re.search(sys.argv[2] + r": \{([^}]*)\}", text[text.index("predicted:"):]).group(1)
print(dict(re.findall(r"(p\d+): ([-\d.]+)", block))[sys.argv[3]])
PY
}

$B synth --shape stories15M --seed 1 --out "$tmp/s15.bin" --tokenizer-out "$tmp/s15.tok.bin" >/dev/null 2>&1
echo "ttft_ms: 100000
tpot_ms: 10000" > "$tmp/slo.yaml"
trace calib_s 4 16:16 8:8 20 0.25
trace calib_l 1.5 16:16 128:128 20 0.7
# Busy arrivals: a long request (16 in, 200 out), then short ones (16 in, 8 out) 0.15, 0.35 and 0.55 s into
# it, while the long one decodes. Colocated prefill: a long request, then 0.2 s into it one with a long
# prompt (240 in, 2 out), whose prefill on the other node runs while the long one decodes.
rounds_trace calib_b 0.0:16:200 0.15:16:8 0.35:16:8 0.55:16:8
rounds_trace calib_p 0.0:16:200 0.2:240:2

for w in "${WORKLOADS[@]}"; do
  read -r name rate inr outr <<<"$w"
  trace "$name" "$rate" "$inr" "$outr" "$N"
  for r in $(seq "$REPEATS"); do
    run="$OUT/$name-r$r"
    mkdir -p "$run"
    uptime > "$run/uptime.txt"
    for cpu in 0 1; do  # CPU 0 runs the prefill node: time prefill with its layer-wise KV export
      taskset -c "$cpu" "$B" profile --model "$tmp/s15.bin" --tokenizer "$tmp/s15.tok.bin" --backend cpu --threads 1 \
        --family "cpu$cpu" --memory-gb 1 --max-tokens 255 --max-batch 16 --repeats 5 --out "$run/cpu$cpu.yaml" \
        $([ "$cpu" = 0 ] && echo --prefill-export) > "$run/profile-cpu$cpu.txt"
    done
    fleet "$run/fleet0.yaml" "request_overhead_ms: 0" "$run"
    for c in calib_s calib_l calib_b; do
      "$B" solve --fleet "$run/fleet0.yaml" --workload "$tmp/$c.yaml" --slo "$tmp/slo.yaml" \
        --out "$run/$c-plan.yaml" > "$run/$c-solve.txt" 2>&1
    done
    # The router's health probe (500 ms by default) can time out on a node starved of CPU by other work on
    # this shared machine, which takes the node out of rotation and cancels its streams: be patient here.
    sed -i 's/strategy: least_latency}/strategy: least_latency, args: [--probe-timeout-ms, "10000", --unhealthy-threshold, "10"]}/' \
      "$run/calib_s-plan.yaml"
    "$B" up "$run/calib_s-plan.yaml" --port 0 > "$tmp/up.out" 2> "$run/up.err" &
    up_pid=$!
    for _ in $(seq 600); do grep -q "cluster ready" "$tmp/up.out" && break; kill -0 "$up_pid" || break; sleep 0.1; done
    url=$(grep -o 'http://[0-9.]*:[0-9]*' "$tmp/up.out" | head -1 || true)
    [ -n "$url" ] || { cat "$run/up.err" >&2; exit 1; }
    echo "solver-validate: $name run $r at $url ($(cut -d, -f3- "$run/uptime.txt" | xargs))" >&2
    for c in calib_s calib_l calib_b calib_p; do
      "$B" bench serve --url "$url" --dataset "trace:$tmp/$c.jsonl" --num-prompts "$(wc -l < "$tmp/$c.jsonl")" \
        --seed "$((100 + r))" \
        --out "$run/$c.json" > /dev/null 2>&1 || echo "solver-validate: calibration requests failed" >&2
    done
    "$B" bench serve --url "$url" --dataset "trace:$tmp/$name.jsonl" --num-prompts "$N" --seed "$r" \
      --out "$run/bench.json" >&2 || echo "solver-validate: some requests failed (counted in the table)" >&2
    stop_cluster
    # The colocated slowdown: the long streams' inter-token gaps while the other node prefills a long prompt
    # against their gaps away from it (see the header); the other calibrations are predicted with it.
    slowdown=$(python3 - "$run/calib_p.json" "$tmp/calib_p.jsonl" "$run/cpu0.yaml" <<'PY'
import json, re, statistics, sys
d, trace = json.load(open(sys.argv[1])), [json.loads(l) for l in open(sys.argv[2])]
pts = sorted((int(t), float(ms)) for t, b, ms in re.findall(r"tokens: (\d+), batch: (\d+), ms: ([\d.]+)", open(sys.argv[3]).read()) if b == "1")
def prefill_ms(n):  # the profile's measured prefill at n tokens, linear between points
    k = max(1, min(len(pts) - 1, next((i for i, (t, _) in enumerate(pts) if t >= n), len(pts) - 1)))
    (t0, y0), (t1, y1) = pts[k - 1], pts[k]
    return y0 + (y1 - y0) * (n - t0) / (t1 - t0)
inside, outside = [], []
for r in range(0, len(trace), 2):
    lo, pr = r, r + 1
    if not d["ttfts"][lo] or not d["ttfts"][pr] or not d["itls"][lo]:
        continue
    end = trace[pr]["timestamp"] + d["ttfts"][pr]  # the probe's first token: its prefill and KV hand-off are done
    window = (end - prefill_ms(trace[pr]["input_len"]) / 1e3, end)
    t = trace[lo]["timestamp"] + d["ttfts"][lo]
    for k, gap in enumerate(d["itls"][lo]):
        a, t = t, t + gap
        if k < 3:
            continue  # the stream's start
        if a >= window[0] and t <= window[1]:
            inside.append(gap)
        elif t < window[0] - 0.05 or a > window[1] + 0.05:
            outside.append(gap)
f = statistics.mean(inside) / statistics.mean(outside) - 1 if len(inside) >= 20 and outside else 0.0
print(f"{max(0.0, f):.4f}")
PY
)
    fleet "$run/fleet0.yaml" "colocated_slowdown: $slowdown" "$run"
    for c in calib_s calib_l calib_b; do
      "$B" solve --fleet "$run/fleet0.yaml" --workload "$tmp/$c.yaml" --slo "$tmp/slo.yaml" \
        --out "$run/$c-plan.yaml" > "$run/$c-solve.txt" 2>&1
    done
    # Serving overheads from the calibration requests alone (see the header).
    overheads=$(python3 - "$run" \
      "$(predicted "$run/calib_s-plan.yaml" ttft_ms p50)" "$(predicted "$run/calib_s-plan.yaml" tpot_ms p50)" \
      "$(predicted "$run/calib_l-plan.yaml" ttft_ms p50)" "$(predicted "$run/calib_l-plan.yaml" tpot_ms p50)" \
      "$(predicted "$run/calib_b-plan.yaml" ttft_ms p50)" <<'PY'
import json, statistics, sys
run, ttft_s, tpot_s, ttft_l, tpot_l, ttft_b = sys.argv[1], *map(float, sys.argv[2:7])
busy = json.load(open(run + "/calib_b.json"))
busy_samples = sorted(max(0.0, t * 1e3 - ttft_b) for t, n in zip(busy["ttfts"], busy["output_lens"]) if t and n == 8)
short, long_ = json.load(open(run + "/calib_s.json")), json.load(open(run + "/calib_l.json"))
def tpot(d):
    return statistics.median(sum(g) / len(g) * 1e3 for g in d["itls"] if g)
samples = sorted([max(0.0, t * 1e3 - ttft_s) for t in short["ttfts"] if t] +
                 [max(0.0, t * 1e3 - ttft_l) for t in long_["ttfts"] if t])
ds, dl = tpot(short) - tpot_s, tpot(long_) - tpot_l  # excess per gap with 7 and 127 gaps
xs, xl = 1 / 7, 1 / 127
cs = (ds - dl) / (xs - xl)
ct = dl - cs * xl
if cs < 0:  # no start cost: one constant per token
    cs, ct = 0.0, max(0.0, (ds + dl) / 2)
elif ct < 0:  # no per-token cost: least squares of d = cs * x
    ct, cs = 0.0, max(0.0, (ds * xs + dl * xl) / (xs * xs + xl * xl))
print("request_overhead_samples_ms: [" + ", ".join(f"{x:.3f}" for x in samples) + "]")
print("request_overhead_busy_samples_ms: [" + ", ".join(f"{x:.3f}" for x in busy_samples) + "]")
print(f"token_overhead_ms: {ct:.4f}")
print(f"stream_start_overhead_ms: {cs:.3f}")
PY
)
    overheads="$overheads
colocated_slowdown: $slowdown"
    for j in "$run/bench.json" "$run/calib_s.json" "$run/calib_l.json" "$run/calib_b.json" "$run/calib_p.json"; do  # keep the summaries, not every request's token times
      python3 -c 'import json, sys; d = json.load(open(sys.argv[1])); json.dump({k: v for k, v in d.items() if not isinstance(v, list)}, open(sys.argv[1], "w"), indent=1, sort_keys=True)' "$j"
    done
    fleet "$run/fleet.yaml" "$overheads" "$run"
    "$B" solve --fleet "$run/fleet.yaml" --workload "$tmp/$name.yaml" --slo "$tmp/slo.yaml" \
      --out "$run/plan.yaml" > "$run/solve.txt" 2>&1
  done
done

python3 - "$OUT" "$REPEATS" "${WORKLOADS[@]}" > "$OUT/table.md" <<'PY'
import json, os, re, statistics, sys
out, reps, wls = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
def pred(path):
    text = open(path).read()
    p = text[text.index("predicted:"):]
    get = lambda k: {q: float(v) for q, v in re.findall(r"(p\d+): ([-\d.]+)", re.search(k + r": \{([^}]*)\}", p).group(1))}
    return {"ttft": get("ttft_ms"), "tpot": get("tpot_ms")}
def overhead(path):
    text = open(path).read()
    samples = [float(x) for x in re.search(r"request_overhead_samples_ms: \[([^\]]*)\]", text).group(1).split(",")]
    token = float(re.search(r"token_overhead_ms: ([\d.]+)", text).group(1))
    start = float(re.search(r"stream_start_overhead_ms: ([\d.]+)", text).group(1))
    busy = [float(x) for x in re.search(r"request_overhead_busy_samples_ms: \[([^\]]*)\]", text).group(1).split(",")]
    slow = float(re.search(r"colocated_slowdown: ([\d.]+)", text).group(1))
    return "%.1f (%.1f-%.1f), busy %.1f (%.1f-%.1f), per token %.2f, stream start %.1f, colocated slowdown %.2f" % (
        statistics.median(samples), min(samples), max(samples), statistics.median(busy), min(busy), max(busy),
        token, start, slow)
print("| workload | metric | predicted ms (runs) | measured ms (runs) | error % (runs) | median error % |")
print("| --- | --- | --- | --- | --- | --- |")
errors, notes = [], []
for w in wls:
    name, rate, inr, outr = w.split()
    runs = [f"{out}/{name}-r{r}" for r in range(1, reps + 1)]
    runs = [d for d in runs if os.path.exists(d + "/bench.json") and os.path.exists(d + "/plan.yaml")]
    if not runs:
        print(f"| {name} | (no completed run) | | | | |")
        continue
    preds = [pred(f"{d}/plan.yaml") for d in runs]
    meas = [json.load(open(f"{d}/bench.json")) for d in runs]
    label = f"{name}: {rate} req/s, in {inr.replace(':', '-')}, out {outr.replace(':', '-')}"
    for metric in ("ttft", "tpot"):
        for q in ("p50", "p90"):
            key = ("median" if q == "p50" else q) + f"_{metric}_ms"
            p = [x[metric][q] for x in preds]
            m = [x[key] for x in meas]
            e = [(a - b) / b * 100 for a, b in zip(p, m)]
            med = statistics.median(e)
            errors.append(abs(med))
            print(f"| {label} | {metric.upper()} {q} | {', '.join(f'{x:.1f}' for x in p)} | "
                  f"{', '.join(f'{x:.1f}' for x in m)} | {', '.join(f'{x:+.0f}' for x in e)} | {med:+.0f} |")
    loads = [open(f"{d}/uptime.txt").read().split("load average:")[1].strip() for d in runs]
    ovh = "; ".join(overhead(d + "/fleet.yaml") for d in runs)
    failed = ", ".join(str(m.get("failed", 0)) for m in meas)
    notes.append(f"- {name}: failed requests {failed}; request overhead median (min-max) idle and busy, per token, stream start (ms), colocated slowdown (fraction): {ovh}; "
                 f"load averages (1, 5, 15 min) before the runs: {'; '.join(loads)}")
within = sum(e <= 20 for e in errors)
print(f"\n{within} of {len(errors)} cells within 20% (median over runs); largest median |error| {max(errors):.0f}%.\n")
print("\n".join(notes))
PY
cat "$OUT/table.md"
