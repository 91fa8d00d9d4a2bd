#!/usr/bin/env bash
# Do a stream's greedy tokens depend on what shares its engine steps? (docs/solver.md "Workload shift": the
# token divergence of the stories260K shift.) One colocated node (`tessera up`, cpu backend, one thread, CPU 1,
# no role change, no prefill node); the same N prompts of `tessera fault-load` sent first by 1 client (every step
# holds one sequence: a prompt alone, or one decode) and written as the reference, then by 6 clients (new
# prompts' chunks share steps with the others' decodes) and compared with it token by token. Prints the
# accounting and each request that differs.
#
#   scripts/planner-tie.sh MODEL OUT_DIR       env: KV (KV cache dtype, f16), N (prompts, 1800), TOKENS (200)
set -euo pipefail
cd "$(dirname "$0")/.."
bin=$(realpath "${BIN:-build/release/bin/tessera}")
[ $# -eq 2 ] || { echo "usage: scripts/planner-tie.sh MODEL OUT_DIR" >&2; exit 2; }
model=$(realpath "$1") out="$2" kv="${KV:-f16}" n="${N:-1800}" tokens="${TOKENS:-200}"
mkdir -p "$out"
cat >"$out/cluster.yaml" <<Y
model: $model
router: {port: 0}
nodes:
  - {name: solo, role: both, backend: cpu, threads: 1, cpus: [1], args: [--kv-dtype, $kv]}
Y
"$bin" up "$out/cluster.yaml" >"$out/up.out" 2>"$out/up.err" &
up=$!
trap 'kill -TERM $up 2>/dev/null || true; wait $up 2>/dev/null || true' EXIT
for _ in $(seq 600); do grep -q "cluster ready" "$out/up.out" 2>/dev/null && break; sleep 0.1; done
grep -q "cluster ready" "$out/up.out" || { echo "planner-tie: the node did not start" >&2; cat "$out/up.err" >&2; exit 1; }
url=$(grep -o 'OpenAI API at http://[0-9.:]*' "$out/up.out" | sed 's/OpenAI API at //')
name=$(basename "$model")
"$bin" fault-load --url "$url" --model "$name" --clients 1 --requests "$n" --max-tokens "$tokens" \
  --write-reference "$out/ref.jsonl" >"$out/one.json"
"$bin" fault-load --url "$url" --model "$name" --clients 6 --requests $((n / 6)) --max-tokens "$tokens" \
  --reference "$out/ref.jsonl" >"$out/six.json"
python3 - "$out/one.json" "$out/six.json" <<'PY'
import json, sys
one, six = (json.load(open(p)) for p in sys.argv[1:])
print(f"planner-tie: {six['sent']} requests, failed {one['failed']} + {six['failed']}; with 6 clients "
      f"{six['mismatched_requests']} differ from the 1-client run ({six['lost_tokens']} tokens lost, "
      f"{six['duplicated_tokens']} repeated)")
for x in six["differing"]:
    print(f"planner-tie: request {x['i']} differs from token {x['first_difference_at']} of {x['reference_tokens']}")
PY
