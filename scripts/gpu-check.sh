#!/usr/bin/env bash
# The prepared GPU check (issue 19): on a machine with an NVIDIA GPU, build with the cuda backend and run
# what cannot run on the CPU-only development machines, printing one summary line per check:
#   build        configure with TESSERA_CUDA=ON and build the binary and the gpu tests
#   conformance  every fast conformance case on cuda against ref (tests/ops/cuda_test.cc)
#   greedy       stories260K greedy, 256 tokens, byte for byte against models/stories260K/greedy-256.txt
#   graph        the same with --graph on (decode replayed from CUDA graphs)
#   pd cpu->cuda / pd cuda->cpu   a prefill node and a decode node on unlike backends: greedy completions
#                equal to single-node ref generation for three prompts
#   families     every family shape at f16/q8_0/q4_k/q6_k on cuda: prompt logits and 24 greedy tokens vs ref
#   bench        `tessera bench generate` on cuda (its tokens/s line)
#   vulkan ...   where the binary has the vulkan backend and Vulkan's device 0 is a GPU (the NVIDIA driver's
#                ICD): every fast conformance case on vulkan against ref, vulkan_test, greedy and graph as above,
#                and PD cpu->vulkan, vulkan->cpu, vulkan->cuda; SKIP with the reason otherwise (no loader or
#                glslc at build time, or only lavapipe, which CI covers)
# Sized for about 8 minutes on one H200, most of it the build. Exits 2 at once, saying why, when no GPU is
# visible; otherwise 0 when every check passed, 1 when one failed. Logs go to $GPU_CHECK_LOGS (default
# build/gpu-check/). Usage: bash scripts/gpu-check.sh [--no-build]  (--no-build: use build/release as is)
# Rehearsal without a GPU: GPU_CHECK_BACKEND=opencl bash scripts/gpu-check.sh --no-build runs the same
# greedy, graph, PD and bench checks with opencl in cuda's place (no GPU probe, no cuda conformance).
set -uo pipefail
cd "$(dirname "$0")/.."
root="$PWD"
logs="${GPU_CHECK_LOGS:-$root/build/gpu-check}"
mkdir -p "$logs"
build=1
[ "${1:-}" = "--no-build" ] && build=0

gpu="${GPU_CHECK_BACKEND:-cuda}"
if [ "$gpu" = cuda ]; then
  if ! command -v nvidia-smi >/dev/null 2>&1; then
    echo "gpu-check: no NVIDIA GPU visible here (nvidia-smi not found); nothing checked" >&2
    exit 2
  fi
  if ! nvidia-smi -L >"$logs/nvidia-smi.txt" 2>&1 || ! grep -q '^GPU ' "$logs/nvidia-smi.txt"; then
    echo "gpu-check: no NVIDIA GPU visible here (nvidia-smi -L: $(head -c 200 "$logs/nvidia-smi.txt")); nothing checked" >&2
    exit 2
  fi
  echo "gpu-check: $(head -1 "$logs/nvidia-smi.txt")"
else
  echo "gpu-check: rehearsal with --backend $gpu in cuda's place"
fi

failed=0
summary=()
report() {  # name status detail
  summary+=("$(printf '%-16s %-4s %s' "$1" "$2" "$3")")
  [ "$2" = "PASS" ] || [ "$2" = "SKIP" ] || failed=1
  echo "gpu-check: $1: $2 $3"
}

bin="$root/build/release/bin/tessera"
models="$root/models/stories260K"
if [ "$build" = 1 ]; then
  export PATH="$PATH:/usr/local/cuda/bin"
  start=$SECONDS
  if timeout 420 cmake --preset release -DTESSERA_CUDA=ON >"$logs/build.log" 2>&1 &&
    timeout 420 cmake --build --preset release -j "$(nproc)" --target tessera cuda_test vulkan_families_test >>"$logs/build.log" 2>&1 &&
    { ! grep -q 'TESSERA_HAVE_VULKAN' build/release/build.ninja ||
      timeout 300 cmake --build --preset release -j "$(nproc)" --target conformance_test vulkan_test \
        >>"$logs/build.log" 2>&1; }; then
    report build PASS "$((SECONDS - start)) s, $(nvcc --version | tail -1)"
  else
    report build FAIL "see $logs/build.log: $(grep -m1 -E 'error' "$logs/build.log" | head -c 200)"
    printf '%s\n' "${summary[@]}"
    exit 1
  fi
fi
if [ ! -x "$bin" ]; then
  report build FAIL "$bin does not exist"
  printf '%s\n' "${summary[@]}"
  exit 1
fi

# conformance (and cuda_test's own greedy check)
if [ "$gpu" != cuda ]; then
  report conformance SKIP "rehearsal: cuda only"
elif timeout 300 "$root/build/release/tests/cuda_test" >"$logs/cuda_test.log" 2>&1; then
  report conformance PASS "$(grep -m1 '\[ cuda \]' "$logs/cuda_test.log" | sed 's/\[ cuda \] //')"
elif grep -q SKIPPED "$logs/cuda_test.log"; then
  report conformance FAIL "skipped: $(grep -m1 -i 'no cuda' "$logs/cuda_test.log" | head -c 200)"
else
  report conformance FAIL "see $logs/cuda_test.log: $(grep -m1 -A2 'Failure' "$logs/cuda_test.log" | tr '\n' ' ' | head -c 200)"
fi

# greedy, eager and graph
greedy_checks() {  # backend [name prefix]
  for mode in off on; do
    name="${2:-}greedy"
    [ "$mode" = on ] && name="${2:-}graph"
    if timeout 120 "$bin" generate --model "$models" --temperature 0 --max-tokens 256 --backend "$1" --graph "$mode" \
      --quiet >"$logs/$name.txt" 2>"$logs/$name.err" && cmp -s "$logs/$name.txt" "$models/greedy-256.txt"; then
      report "$name" PASS "256 tokens byte for byte (--graph $mode)"
    else
      report "$name" FAIL "--graph $mode: $(cmp "$logs/$name.txt" "$models/greedy-256.txt" 2>&1 | head -c 120) $(head -c 200 "$logs/$name.err")"
    fi
  done
}
greedy_checks "$gpu"

# PD pairs
prompts=("Once upon a time, there was a little girl named" "Lily went to the park with her mom and she saw"
  "The cat sat on the mat and looked at the big dog")
wait_url() {  # log file -> url on stdout (empty after 60 s)
  for _ in $(seq 600); do
    port="$(grep -o 'listening on http://127.0.0.1:[0-9]*' "$1" 2>/dev/null | grep -o '[0-9]*$' | head -1)"
    [ -n "$port" ] && { echo "http://127.0.0.1:$port"; return; }
    sleep 0.1
  done
}
pd_pair() {  # prefill-backend decode-backend
  local tag="pd $1->$2" plog="$logs/pd-$1-$2-prefill.log" dlog="$logs/pd-$1-$2-decode.log" ok=1 detail=""
  "$bin" serve --model "$models" --port 0 --role prefill --backend "$1" >"$plog" 2>&1 &
  local ppid=$!
  local purl
  purl="$(wait_url "$plog")"
  "$bin" serve --model "$models" --port 0 --role decode --backend "$2" --prefill-nodes "$purl" --pd-min-tokens 4 \
    >"$dlog" 2>&1 &
  local dpid=$!
  local durl
  durl="$(wait_url "$dlog")"
  if [ -z "$purl" ] || [ -z "$durl" ]; then
    ok=0
    detail="a node did not start (see $plog, $dlog)"
  else
    for p in "${prompts[@]}"; do
      want="$("$bin" generate --model "$models" --prompt "$p" --max-tokens 40 --temperature 0 --no-echo --quiet \
        --backend ref)"
      got="$(python3 - "$durl" "$p" 2>>"$dlog" <<'PY'
import json, sys, urllib.request
body = json.dumps({"model": "stories260K", "prompt": sys.argv[2], "max_tokens": 40, "temperature": 0}).encode()
req = urllib.request.Request(sys.argv[1] + "/v1/completions", body, {"content-type": "application/json"})
print(json.load(urllib.request.urlopen(req, timeout=60))["choices"][0]["text"])
PY
)"
      if [ "$got" != "$want" ]; then
        ok=0
        detail="'$p': got '${got:0:60}', want '${want:0:60}'"
        break
      fi
    done
    remote="$(python3 -c 'import sys, urllib.request; print(urllib.request.urlopen(sys.argv[1] + "/metrics", timeout=10).read().decode())' "$durl" 2>/dev/null | grep '^tessera_pd_requests_total{path="remote"}' | awk '{print $2}')"
    [ "$ok" = 1 ] && detail="3 prompts equal single-node ref text, $remote remote prefills"
  fi
  kill "$dpid" "$ppid" 2>/dev/null
  wait "$dpid" "$ppid" 2>/dev/null
  if [ "$ok" = 1 ]; then report "$tag" PASS "$detail"; else report "$tag" FAIL "$detail"; fi
}
pd_pair cpu "$gpu"
pd_pair "$gpu" cpu

# every family (tests/engine/vulkan_families_test.cc with cuda in vulkan's place): prompt logits within 1e-9 of
# ref's and 24 greedy tokens equal to ref's at f16, q8_0, q4_k and q6_k
fam="$root/build/release/tests/vulkan_families_test"
if [ "$gpu" != cuda ]; then
  report families SKIP "rehearsal: cuda only"
elif [ ! -x "$fam" ]; then
  report families FAIL "$fam does not exist"
elif TESSERA_FAMILIES_BACKEND=cuda timeout 300 "$fam" >"$logs/cuda_families.log" 2>&1; then
  report families PASS "$(grep -c '\[       OK \]' "$logs/cuda_families.log") family tests, every dtype"
else
  report families FAIL "$(grep -c '\[  FAILED  \].*LogitsAndGreedy' "$logs/cuda_families.log") failed, see $logs/cuda_families.log"
fi

# vulkan on the GPU (the NVIDIA driver's Vulkan ICD), where the binary has the backend
"$bin" inspect --devices >"$logs/devices.txt" 2>&1
vk_type="$(awk '/^vulkan device 0:/ {f=1} f && /deviceType/ {print $3; exit}' "$logs/devices.txt")"
if ! grep -q '^vulkan device 0:' "$logs/devices.txt"; then
  report vulkan SKIP "$(grep -m1 '^vulkan' "$logs/devices.txt" || echo 'built without the vulkan backend (no Vulkan loader or glslc)')"
elif [ "$vk_type" = cpu ] && [ "$gpu" = cuda ]; then
  report vulkan SKIP "Vulkan's device 0 is $(grep -m1 '^vulkan device 0:' "$logs/devices.txt" | cut -d: -f2-) (no GPU ICD; lavapipe runs in CI)"
else
  echo "gpu-check: vulkan on $(grep -m1 '^vulkan device 0:' "$logs/devices.txt" | cut -d: -f2-)"
  if TESSERA_CONFORMANCE_BACKENDS=vulkan timeout 300 "$root/build/release/tests/conformance_test" \
    --gtest_filter='Ops/Conformance.*' >"$logs/vulkan_conformance.log" 2>&1; then
    report "vulkan conf" PASS "$(grep -c ' vulkan: .* 0 FAIL' "$logs/vulkan_conformance.log") operators, 0 FAIL"
  else
    report "vulkan conf" FAIL "see $logs/vulkan_conformance.log: $(grep -m1 -A2 'Failure' "$logs/vulkan_conformance.log" | tr '\n' ' ' | head -c 200)"
  fi
  if timeout 300 "$root/build/release/tests/vulkan_test" >"$logs/vulkan_test.log" 2>&1; then
    report "vulkan_test" PASS "$(grep -c '\[       OK \]' "$logs/vulkan_test.log") tests"
  else
    report "vulkan_test" FAIL "see $logs/vulkan_test.log"
  fi
  greedy_checks vulkan "vulkan "
  pd_pair cpu vulkan
  pd_pair vulkan cpu
  [ "$gpu" = cuda ] && pd_pair vulkan cuda
fi

# bench
if timeout 180 "$bin" bench generate --model "$models" --backend "$gpu" --prompt-tokens 64 --gen-tokens 128 --repeat 3 \
  --no-ceilings >"$logs/bench.txt" 2>&1; then
  report bench PASS "$(grep -m1 -i 'decode' "$logs/bench.txt" | head -c 200)"
else
  report bench FAIL "see $logs/bench.txt: $(tail -1 "$logs/bench.txt" | head -c 200)"
fi

echo "gpu-check summary:"
printf '%s\n' "${summary[@]}"
exit "$failed"
