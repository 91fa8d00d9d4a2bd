#!/usr/bin/env bash
# Prefix reuse for a hybrid model (Qwen3.5's gated delta-net layers; state checkpoints, docs/models.md "Recurrent
# state"): a seeded multi-turn replay (`tessera bench conversations`: tenants whose users share a system prompt, each
# user's every turn sending the whole history so far plus a new message) against one `tessera serve` node, with state
# checkpoints (on, the default) and without them (off: --state-checkpoints 0, every prompt computed whole), run
# alternating, REPEATS times each. Every reply of every run must equal the first off run's token for token.
# Reports TTFT p50/p99, TPOT p50, the hit rate the node reported (cached_tokens / prompt tokens) beside the oracle
# (an infinite block cache), and the ratio of TTFT p50 off / on; writes $OUT/{runs.jsonl,summary.md}.
#   bash scripts/bench-hybrid-prefix.sh        (after scripts/build release)
# Knobs: SHAPE (qwen3.5-0.8b), LAYERS (0: all), DTYPE (q8_0), THREADS (2), REPEATS (3), TENANTS (2), USERS (3 per
# tenant), TURNS (3), SYSTEM (512), USER_LEN (32), OUTLEN (16), THINK (1 s), MAX_SEQS (8), KV_MIB (1024),
# MAX_MODEL_LEN (4096: the served context, which with MAX_SEQS caps the node's KV blocks), OUT (docs/bench/hybrid-prefix),
# CHAT (0; 1: the replay as chat completions, `bench conversations --chat`, through TEMPLATE: chatml or a template
# file; SYSTEM and USER_LEN then count words), TESSERA_BIN (the binary to measure), GEN_BIN (the binary that writes
# the model and plays the load; default TESSERA_BIN), BASE_BIN (another build to compare: a third configuration, `base`,
# checkpoints on, served by it; BASE_LABEL names it), CONFIGS (the configurations run in each repeat, in order:
# "off on", or "off base on" with BASE_BIN; the first run of the first one is the replies' reference).
set -euo pipefail
cd "$(dirname "$0")/.."
B=${TESSERA_BIN:-build/release/bin/tessera}
G=${GEN_BIN:-$B}  # the binary that writes the model and plays the load (serve runs $B)
SHAPE=${SHAPE:-qwen3.5-0.8b}
LAYERS=${LAYERS:-0}
DTYPE=${DTYPE:-q8_0}
THREADS=${THREADS:-2}
REPEATS=${REPEATS:-3}
TENANTS=${TENANTS:-2}
USERS=${USERS:-3}
TURNS=${TURNS:-3}
SYSTEM=${SYSTEM:-512}
USER_LEN=${USER_LEN:-32}
OUTLEN=${OUTLEN:-16}
THINK=${THINK:-1}
MAX_SEQS=${MAX_SEQS:-8}
KV_MIB=${KV_MIB:-1024}
MAX_MODEL_LEN=${MAX_MODEL_LEN:-4096}
OUT=${OUT:-docs/bench/hybrid-prefix}
CHAT=${CHAT:-0}
BASE_BIN=${BASE_BIN:-}
BASE_LABEL=${BASE_LABEL:-$BASE_BIN}
if [[ -n $BASE_BIN ]]; then CONFIGS=${CONFIGS:-off base on}; else CONFIGS=${CONFIGS:-off on}; fi
TEMPLATE=${TEMPLATE:-chatml}
chat_serve=() chat_bench=()
((CHAT)) && chat_serve=(--chat-template "$TEMPLATE") chat_bench=(--chat)
mkdir -p "$OUT"
: >"$OUT/runs.jsonl"
tmp=$(mktemp -d)
node=""
trap '[[ -n $node ]] && kill "$node" 2>/dev/null; rm -rf "$tmp"' EXIT

model="$tmp/model.gguf"
layer_flags=()
((LAYERS > 0)) && layer_flags=(--layers "$LAYERS")
"$G" synth --shape "$SHAPE" "${layer_flags[@]}" --format gguf --dtype "$DTYPE" --max-seq-len 8192 --seed 1 \
  --out "$model" >/dev/null

run() {  # $1: on | off | base, $2: repeat
  local cfg=$1 rep=$2 flags=(--model "$model" --threads "$THREADS" --max-num-seqs "$MAX_SEQS" --kv-memory "$KV_MIB"
    --max-model-len "$MAX_MODEL_LEN" --port 0 "${chat_serve[@]}") bin=$B
  [[ $cfg == off ]] && flags+=(--state-checkpoints 0)
  [[ $cfg == base ]] && bin=$BASE_BIN
  "$bin" serve "${flags[@]}" >"$tmp/node.log" 2>&1 &
  node=$!
  local url=""
  for _ in $(seq 600); do
    url=$(grep -o 'listening on http://[0-9.]*:[0-9]*' "$tmp/node.log" 2>/dev/null | head -1 | cut -d' ' -f3) || true
    [[ -n $url ]] && break
    sleep 0.1
  done
  [[ -n $url ]] || { echo "the node did not start:" >&2; cat "$tmp/node.log" >&2; exit 1; }
  "$G" bench conversations --url "$url" --tenants "$TENANTS" --users-per-tenant "$USERS" --turns "$TURNS" \
    --system-len "$SYSTEM" --user-len "$USER_LEN" --output-len "$OUTLEN" --think "$THINK" --seed 7 "${chat_bench[@]}" \
    --out "$tmp/$cfg-$rep.json" >"$tmp/bench.log" 2>&1 || { echo "run $cfg/$rep failed:" >&2; cat "$tmp/bench.log" >&2; }
  curl -s "$url/metrics" >"$tmp/$cfg-$rep.metrics" || true
  kill "$node"
  wait "$node" 2>/dev/null || true
  node=""
  python3 - "$tmp" "$cfg" "$rep" >>"$OUT/runs.jsonl" <<'PY'
import json, sys
tmp, cfg, rep = sys.argv[1], sys.argv[2], int(sys.argv[3])
r = json.load(open(f"{tmp}/{cfg}-{rep}.json"))
held = [l.split()[-1] for l in open(f"{tmp}/{cfg}-{rep}.metrics") if l.startswith("tessera_state_checkpoints_used")]
print(json.dumps({"config": cfg, "repeat": rep, "completed": r["completed"], "failed": r["failed"],
                  "ttft_p50_ms": r["median_ttft_ms"], "ttft_p99_ms": r["p99_ttft_ms"], "tpot_p50_ms": r["median_tpot_ms"],
                  "hit_rate": r["hit_rate"], "oracle_hit_rate": r["oracle_hit_rate"],
                  "checkpoints_held": float(held[0]) if held else None,
                  "outputs": [q["output_ids"] for q in r["requests"]]}))
PY
  echo "$(date +%T) $cfg/$rep: $(tail -1 "$OUT/runs.jsonl" | python3 -c 'import json,sys; j=json.load(sys.stdin); print("ttft p50 %.1f ms, hit %.3f (oracle %.3f), %d ok" % (j["ttft_p50_ms"], j["hit_rate"], j["oracle_hit_rate"], j["completed"]))')" >&2
}

for rep in $(seq "$REPEATS"); do
  for cfg in $CONFIGS; do run "$cfg" "$rep"; done
done

python3 - "$OUT" "$SHAPE" "$LAYERS" "$DTYPE" "$THREADS" "$TENANTS" "$USERS" "$TURNS" "$SYSTEM" "$USER_LEN" "$OUTLEN" \
  "$THINK" "$BASE_LABEL" <<'PY'
import json, statistics, sys
out = sys.argv[1]
runs = [json.loads(l) for l in open(f"{out}/runs.jsonl")]
ref = runs[0]["outputs"]
bad = [f'{r["config"]}/{r["repeat"]}' for r in runs if r["outputs"] != ref or r["failed"]]
configs = list(dict.fromkeys(r["config"] for r in runs))
by = {c: [r for r in runs if r["config"] == c] for c in configs}
med = lambda rs, k: statistics.median(r[k] for r in rs)
span = lambda rs, k: f'{min(r[k] for r in rs):.1f}-{max(r[k] for r in rs):.1f}'
names = {"off": "off (--state-checkpoints 0)", "on": "on (default)", "base": f"on, served by {sys.argv[13]}"}
lines = [f"Shape {sys.argv[2]} (layers {sys.argv[3] if sys.argv[3] != '0' else 'all'}, {sys.argv[4]}), {sys.argv[5]} "
         f"threads; {sys.argv[6]} tenants x {sys.argv[7]} users x {sys.argv[8]} turns, system prompt {sys.argv[9]}, "
         f"messages {sys.argv[10]}, replies {sys.argv[11]}, think {sys.argv[12]} s. Medians of {len(by[configs[-1]])} "
         "alternating runs (min-max).", "",
         "| state checkpoints | TTFT p50 ms | TTFT p99 ms | TPOT p50 ms | hit rate | oracle |", "| --- | --- | --- | --- | --- | --- |"]
for c in configs:
    rs = by[c]
    lines.append(f"| {names[c]} | {med(rs, 'ttft_p50_ms'):.1f} ({span(rs, 'ttft_p50_ms')}) | {med(rs, 'ttft_p99_ms'):.1f} | "
                 f"{med(rs, 'tpot_p50_ms'):.2f} | {med(rs, 'hit_rate'):.3f} | {med(rs, 'oracle_hit_rate'):.3f} |")
lines.append("")
for c in ("off", "base"):
    if c in by and "on" in by:
        ratios = [o["ttft_p50_ms"] / n["ttft_p50_ms"] for o, n in zip(by[c], by["on"])]
        lines.append(f"TTFT p50 {c} / on: {statistics.median(ratios):.2f}x (per pair: {', '.join(f'{x:.2f}' for x in ratios)}).")
lines.append(f"Every reply equal to the first {configs[0]} run's, token for token: " + ("yes." if not bad else f"NO ({', '.join(bad)})."))
open(f"{out}/summary.md", "w").write("\n".join(lines) + "\n")
print("\n".join(lines))
sys.exit(1 if bad else 0)
PY
