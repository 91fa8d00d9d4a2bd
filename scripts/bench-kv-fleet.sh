#!/usr/bin/env bash
# The multi-turn KV benchmark (issue 30 item 6): a seeded replay of multi-turn conversations (`tessera bench
# conversations`: several tenants, each with a long shared system prompt, several users per tenant, growing history,
# think time between turns) through `tessera route` to NODES `tessera serve` nodes whose --kv-memory holds a fraction
# of the working set. Configurations, run alternating, REPEATS times each:
#   a  main before issue 30: device prefix cache only, the router's prefix_cache strategy on its own history
#   b  + host and disk tiers (--kv-host-memory, --kv-disk-dir)
#   c  + the cluster pool (--kv-pool-memory on a shared control plane), when this build has it
#   d  + KV-event routing (kv_aware on the nodes' own KV events)
# and once a reference with no cache at all (--no-prefix-cache), whose replies every run must equal token for token.
# Reports TTFT p50/p99, TPOT p50, goodput, the hit rate (the nodes' cached_tokens) beside an infinite-cache oracle,
# and the hit rate per tier (the nodes' /metrics); writes docs/bench/kv-fleet/{runs.jsonl,summary.md,kv-fleet.svg}.
#   bash scripts/bench-kv-fleet.sh        (after scripts/build release)
# Knobs: NODES (2), THREADS per node (1), REPEATS (3), CONFIGS ("a b c d"), KV_MIB per node (16), HOST_MIB (32),
# DISK_MIB (256), POOL_MIB (96), TENANTS (4), USERS (6 per tenant), TURNS (6), SYSTEM (1024), USER (64), OUTLEN (32),
# THINK (6 s), GOODPUT_TTFT_MS (250), OUT (docs/bench/kv-fleet), KILL_AFTER (unset: seconds into each replay after
# which the last node is SIGKILLed, for the fault run: FAULT runs must still complete every turn with the same replies),
# SHAPE (stories15M: the synthesized model's shape), SYNTH_ARGS (more `tessera synth` flags, e.g. "--layers 8 --dim
# 512" for a hybrid shape cut down), SERVE_ARGS (more flags for every node, e.g. "--max-num-seqs 8").
set -euo pipefail
cd "$(dirname "$0")/.."
B=${TESSERA_BIN:-build/release/bin/tessera}
NODES=${NODES:-2}
THREADS=${THREADS:-1}
REPEATS=${REPEATS:-3}
CONFIGS=${CONFIGS:-"a b c d"}
KV_MIB=${KV_MIB:-16}
HOST_MIB=${HOST_MIB:-32}
DISK_MIB=${DISK_MIB:-256}
POOL_MIB=${POOL_MIB:-96}
TENANTS=${TENANTS:-4}
USERS=${USERS:-6}
TURNS=${TURNS:-6}
SYSTEM=${SYSTEM:-1024}
USER=${USER_LEN:-64}
OUTLEN=${OUTLEN:-32}
THINK=${THINK:-6}
GOODPUT_TTFT_MS=${GOODPUT_TTFT_MS:-250}
OUT=${OUT:-docs/bench/kv-fleet}
SHAPE=${SHAPE:-stories15M}
read -r -a synth_args <<<"${SYNTH_ARGS:-}"
read -r -a serve_args <<<"${SERVE_ARGS:-}"
mkdir -p "$OUT"
tmp=$(mktemp -d)
pids=()
stop_all() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
  pids=()
}
trap 'stop_all; rm -rf "$tmp"' EXIT

wait_url() {  # log file -> the URL of its "listening on" line
  for _ in $(seq 300); do
    if grep -q "listening on" "$1" 2>/dev/null; then grep -o 'listening on http://[0-9.]*:[0-9]*' "$1" | head -1 | cut -d' ' -f3; return; fi
    sleep 0.1
  done
  echo "no listening line in $1:" >&2; cat "$1" >&2; exit 1
}

has_pool=0
# Into a file first: `grep -q` in a pipe stops reading at the match, and under pipefail the writer's SIGPIPE would
# count as "no pool".
"$B" serve --help >"$tmp/serve-help.txt"
grep -q -- '--kv-pool-memory' "$tmp/serve-help.txt" && has_pool=1

model="$tmp/model.gguf"
"$B" synth --shape "$SHAPE" --format gguf --dtype q8_0 --max-seq-len 4096 --seed 1 "${synth_args[@]}" --out "$model" >/dev/null

# One run of configuration $1 (ref, a, b, c, d), repeat $2: start the nodes and the router, replay, collect.
run() {
  local cfg=$1 rep=$2 strategy=prefix_cache route_flags=(--no-kv-events) urls="" node_urls=()
  local ctrl_flags=() i
  if [[ $cfg == c || $cfg == d ]] && ((has_pool)); then
    "$B" ctrl --port 0 >"$tmp/ctrl.log" 2>&1 &
    pids+=($!)
    ctrl_flags=(--ctrl "$(wait_url "$tmp/ctrl.log")")
  fi
  for i in $(seq "$NODES"); do
    local flags=(--model "$model" --threads "$THREADS" --kv-memory "$KV_MIB" --max-model-len "$((SYSTEM + TURNS * (USER + OUTLEN) + 16))" --port 0 "${serve_args[@]}")
    case $cfg in
      ref) flags+=(--no-prefix-cache) ;;
      a) ;;
      b | c | d)
        rm -rf "$tmp/disk$i"
        flags+=(--kv-host-memory "$HOST_MIB" --kv-disk-dir "$tmp/disk$i" --kv-disk-size "$DISK_MIB") ;;
    esac
    if [[ $cfg == c || $cfg == d ]] && ((has_pool)); then flags+=(--kv-pool-memory "$POOL_MIB" "${ctrl_flags[@]}"); fi
    "$B" serve "${flags[@]}" >"$tmp/node$i.log" 2>&1 &
    pids+=($!)
  done
  for i in $(seq "$NODES"); do
    node_urls+=("$(wait_url "$tmp/node$i.log")")
    urls="${urls:+$urls,}${node_urls[-1]}"
  done
  [[ $cfg == ref ]] && strategy=round_robin
  [[ $cfg == d ]] && strategy=kv_aware route_flags=()
  "$B" route --port 0 --nodes "$urls" --strategy "$strategy" "${route_flags[@]}" >"$tmp/router.log" 2>&1 &
  pids+=($!)
  local rurl
  rurl=$(wait_url "$tmp/router.log")
  local killer=""
  if [[ -n ${KILL_AFTER:-} && $cfg != ref ]]; then
    local victim=${pids[$((${#pids[@]} - 2))]}  # the last node (the router is the last process)
    (sleep "$KILL_AFTER" && kill -KILL "$victim" && echo "$(date +%T) killed the last node ($victim)" >&2) &
    killer=$!
  fi
  "$B" bench conversations --url "$rurl" --tenants "$TENANTS" --users-per-tenant "$USERS" --turns "$TURNS" \
    --system-len "$SYSTEM" --user-len "$USER" --output-len "$OUTLEN" --think "$THINK" --seed 7 \
    --goodput-ttft-ms "$GOODPUT_TTFT_MS" --out "$tmp/$cfg-$rep.json" >"$tmp/bench.log" 2>&1 ||
    { echo "run $cfg/$rep failed:" >&2; cat "$tmp/bench.log" >&2; }
  [[ -n $killer ]] && wait "$killer"
  for i in $(seq "$NODES"); do curl -s "${node_urls[$((i - 1))]}/metrics" >"$tmp/$cfg-$rep.metrics$i" || true; done
  stop_all
  python3 - "$tmp" "$cfg" "$rep" "$NODES" "$has_pool" >>"$OUT/runs.jsonl" <<'PY'
import json, re, sys
tmp, cfg, rep, nodes, has_pool = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), sys.argv[5] == "1"
r = json.load(open(f"{tmp}/{cfg}-{rep}.json"))
tiers, shortfalls, failed_blocks = {}, 0.0, 0.0
for i in range(1, nodes + 1):
    for line in open(f"{tmp}/{cfg}-{rep}.metrics{i}"):
        if line.startswith("tessera_kv_load_shortfalls_total"):
            shortfalls += float(line.split()[-1])
        if line.startswith("tessera_kv_tier_failed_blocks_total{"):
            failed_blocks += float(line.split()[-1])
        m = re.match(r'tessera_kv_tier_hit_tokens_total\{([^}]*)\} ([0-9.e+]+)', line)
        if m:
            tier = re.search(r'tier="([^"]*)"', m.group(1)).group(1)
            tiers[tier] = tiers.get(tier, 0) + float(m.group(2))
total_in = r["total_input_tokens"] or 1
lower = sum(tiers.values())
per_tier = {"device": (r["cached_tokens"] - lower) / total_in}
per_tier.update({t: v / total_in for t, v in sorted(tiers.items())})
print(json.dumps({"config": cfg, "repeat": rep, "pool": has_pool, "completed": r["completed"], "failed": r["failed"],
                  "ttft_p50_ms": r["median_ttft_ms"], "ttft_p99_ms": r["p99_ttft_ms"], "tpot_p50_ms": r["median_tpot_ms"],
                  "request_throughput": r["request_throughput"], "goodput": r["request_goodput"],
                  "hit_rate": r["hit_rate"], "oracle_hit_rate": r["oracle_hit_rate"], "hit_rate_by_tier": per_tier,
                  "load_shortfalls": shortfalls, "failed_blocks": failed_blocks,
                  "outputs": [q["output_ids"] for q in r["requests"]]}))
PY
  echo "$(date +%T) $cfg/$rep: $(tail -1 "$OUT/runs.jsonl" | python3 -c 'import json,sys; j=json.load(sys.stdin); print("ttft p50 %.1f ms, hit %.3f (oracle %.3f), %d ok" % (j["ttft_p50_ms"], j["hit_rate"], j["oracle_hit_rate"], j["completed"]))')" >&2
}

: >"$OUT/runs.jsonl"
run ref 1
for rep in $(seq "$REPEATS"); do
  for cfg in $CONFIGS; do
    [[ $cfg == c ]] && ! ((has_pool)) && continue
    run "$cfg" "$rep"
  done
done

python3 - "$OUT" "$NODES" "$KV_MIB" "$HOST_MIB" "$DISK_MIB" "$POOL_MIB" "$TENANTS" "$USERS" "$TURNS" "$SYSTEM" "$USER" "$OUTLEN" "$THINK" "$SHAPE ${SYNTH_ARGS:-}" "${SERVE_ARGS:-}" <<'PY'
import json, statistics, sys
out = sys.argv[1]
nodes, kv, host, disk, pool, tenants, users, turns, system, user, outlen, think, shape, serve_args = sys.argv[2:16]
runs = [json.loads(l) for l in open(f"{out}/runs.jsonl")]
ref = next(r for r in runs if r["config"] == "ref")
names = {"a": "a: device cache, router history", "b": "b: + host/disk tiers", "c": "c: + cluster pool",
         "d": "d: + KV-event routing (kv_aware)"}
rows, groups = [], {}
for r in runs:
    if r["config"] != "ref":
        groups.setdefault(r["config"], []).append(r)
def med(rs, k): return statistics.median(x[k] for x in rs)
def spread(rs, k): return f"{min(x[k] for x in rs):.1f}-{max(x[k] for x in rs):.1f}"
base = med(groups["a"], "ttft_p50_ms") if "a" in groups else None
lines = [f"Multi-turn replay: {tenants} tenants x {users} users x {turns} turns, system prompt {system} tokens, user "
         f"messages {user}, replies {outlen}, think {think} s; {nodes} nodes ({shape.strip()} shape, Q8_0, cpu, 1 thread "
         f"each{', ' + serve_args if serve_args else ''}), --kv-memory {kv} MiB per node, host tier {host} MiB, disk {disk} MiB, pool {pool} MiB. Medians of "
         f"{max(len(g) for g in groups.values())} alternating repeats, min-max in brackets.", "",
         "| configuration | TTFT p50 ms | TTFT p99 ms | TPOT p50 ms | req/s | goodput req/s | hit rate | oracle | "
         "hit rate by tier | TTFT p50 vs a | replies = no-cache run |", "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
for cfg in sorted(groups):
    rs = groups[cfg]
    same = all(r["outputs"] == ref["outputs"] and r["failed"] == 0 for r in rs)
    tiers = {}
    for r in rs:
        for t, v in r["hit_rate_by_tier"].items(): tiers.setdefault(t, []).append(v)
    tier_text = ", ".join(f"{t} {statistics.median(v):.3f}" for t, v in tiers.items())
    ratio = f"{base / med(rs, 'ttft_p50_ms'):.2f}x" if base else "- (a not run)"
    lines.append(f"| {names.get(cfg, cfg)} | {med(rs, 'ttft_p50_ms'):.1f} ({spread(rs, 'ttft_p50_ms')}) | "
                 f"{med(rs, 'ttft_p99_ms'):.1f} | {med(rs, 'tpot_p50_ms'):.2f} | {med(rs, 'request_throughput'):.2f} | "
                 f"{med(rs, 'goodput') if rs[0]['goodput'] is not None else 0:.2f} | {med(rs, 'hit_rate'):.3f} | "
                 f"{med(rs, 'oracle_hit_rate'):.3f} | {tier_text} | {ratio} | {'yes' if same else 'NO'} |")
lines.append("")
lines.append(f"No-cache reference: TTFT p50 {ref['ttft_p50_ms']:.1f} ms, {ref['completed']} turns.")
open(f"{out}/summary.md", "w").write("\n".join(lines) + "\n")
print("\n".join(lines))
# The plot: TTFT p50 (bars, with the repeats' spread) and hit rate beside the oracle, per configuration.
cfgs = sorted(groups)
W, H, left, top, bw = 760, 420, 70, 40, 60
ymax = max(max(r["ttft_p50_ms"] for r in groups[c]) for c in cfgs) * 1.15
svg = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" font-family="sans-serif" font-size="12">',
       f'<text x="{W/2}" y="20" text-anchor="middle" font-size="14">Multi-turn replay: TTFT p50 (bars) and prefix hit rate '
       f'(dots: measured, rings: oracle)</text>']
ph = H - top - 60
for k in range(6):
    y = top + ph - ph * k / 5
    svg.append(f'<line x1="{left}" x2="{W-60}" y1="{y:.1f}" y2="{y:.1f}" stroke="#ddd"/>')
    svg.append(f'<text x="{left-6}" y="{y+4:.1f}" text-anchor="end">{ymax*k/5:.0f}</text>')
    svg.append(f'<text x="{W-54}" y="{y+4:.1f}">{k/5:.1f}</text>')
svg.append(f'<text x="16" y="{top+ph/2}" transform="rotate(-90 16 {top+ph/2})" text-anchor="middle">TTFT p50, ms</text>')
svg.append(f'<text x="{W-14}" y="{top+ph/2}" transform="rotate(90 {W-14} {top+ph/2})" text-anchor="middle">hit rate</text>')
step = (W - left - 80) / max(1, len(cfgs))
for i, c in enumerate(cfgs):
    rs = groups[c]
    x = left + 20 + i * step
    v, lo, hi = med(rs, "ttft_p50_ms"), min(r["ttft_p50_ms"] for r in rs), max(r["ttft_p50_ms"] for r in rs)
    yv = lambda ms: top + ph - ph * ms / ymax
    svg.append(f'<rect x="{x:.1f}" y="{yv(v):.1f}" width="{bw}" height="{top+ph-yv(v):.1f}" fill="#4878a8"/>')
    svg.append(f'<line x1="{x+bw/2:.1f}" x2="{x+bw/2:.1f}" y1="{yv(lo):.1f}" y2="{yv(hi):.1f}" stroke="#000"/>')
    yh = lambda h: top + ph - ph * h
    svg.append(f'<circle cx="{x+bw+18:.1f}" cy="{yh(med(rs, "hit_rate")):.1f}" r="5" fill="#d1603d"/>')
    svg.append(f'<circle cx="{x+bw+18:.1f}" cy="{yh(med(rs, "oracle_hit_rate")):.1f}" r="7" fill="none" stroke="#d1603d"/>')
    svg.append(f'<text x="{x+bw/2:.1f}" y="{top+ph+18}" text-anchor="middle">{names.get(c, c).split(":")[0]}</text>')
    svg.append(f'<text x="{x+bw/2:.1f}" y="{top+ph+34}" text-anchor="middle" font-size="10">{names.get(c, c).split(": ")[1][:28]}</text>')
svg.append("</svg>")
open(f"{out}/kv-fleet.svg", "w").write("\n".join(svg) + "\n")
PY
