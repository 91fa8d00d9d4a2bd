#!/usr/bin/env bash
# Compares Tessera's activations with llama.cpp's, layer by layer, on one file and one prompt of token ids
# (docs/models.md, "Parity at full width"): llama.cpp's graph tensors through activations.cpp (its eval callback),
# Tessera's through `tessera serve` with TESSERA_DUMP_ACTIVATIONS, then compare.py prints the relative difference
# at each point (attn_norm, Qcur, Kcur, Vcur, kqv_out, ffn_inp, ffn_norm, ffn_out, l_out per layer, result_norm).
#
# llama.cpp's library is built once into its own folder beside the one scripts/llamacpp.sh builds (which must have
# run: its stamp gives the same source and the same instruction-set flags, AMX off), never into that one.
#
# usage: scripts/llamacpp-dump/run.sh MODEL OUTDIR KV(f16|f32) FLASH_ATTN(0|1) ID [ID...]
#   KV: both engines' cache type; FLASH_ATTN: llama.cpp's (llama-server's default on the cpu is on, i.e. 1).
#   OUTDIR/llama.cpp and OUTDIR/tessera hold the dumps; OUTDIR/llama.cpp.txt llama.cpp's greedy steps.
# Environment: TESSERA_BIN (default build/release/bin/tessera), TESSERA_CACHE, TESSERA_LLAMACPP_VERSION,
#              TESSERA_LLAMACPP_DUMP_BUILD (llama.cpp's library build folder; default build-dump beside build/: a
#              folder configured with other flags is reconfigured).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
die() {
  echo "llamacpp-dump: error: $*" >&2
  exit 1
}
[[ $# -ge 5 ]] || die "usage: $0 MODEL OUTDIR KV(f16|f32) FLASH_ATTN(0|1) ID [ID...]"
model="$1" out="$2" kv="$3" fa="$4"
shift 4
ids=("$@")
[[ -f "$model" ]] || die "no model file $model"
[[ "$kv" == f16 || "$kv" == f32 ]] || die "KV must be f16 or f32, not $kv"
[[ "$fa" == 0 || "$fa" == 1 ]] || die "FLASH_ATTN must be 0 or 1, not $fa"
tessera="${TESSERA_BIN:-$repo/build/release/bin/tessera}"
[[ -x "$tessera" ]] || die "no tessera binary at $tessera (bash scripts/build release tessera)"

version="${TESSERA_LLAMACPP_VERSION:-3.21.1}"
root="${TESSERA_CACHE:-$HOME/.cache/tessera}/llama.cpp/$version"
stamp="$root/build/.tessera-built"
[[ -f "$stamp" && -f "$root/src/CMakeLists.txt" ]] || die "llama.cpp is not built yet: run bash scripts/llamacpp.sh"
flags="$(sed -n 's/^version=[^ ]* flags=\(.*\) tools=.*$/\1/p' "$stamp")"
[[ -n "$flags" ]] || die "cannot read the build flags from $stamp"
build="${TESSERA_LLAMACPP_DUMP_BUILD:-$root/build-dump}"
tool="$build/bin/tessera-llamacpp-activations"
if [[ ! -f "$build/.flags" || "$(cat "$build/.flags")" != "$flags" ]]; then
  echo "llamacpp-dump: configuring llama.cpp's library in $build" >&2
  launcher=()
  command -v ccache >/dev/null 2>&1 && launcher=(-DCMAKE_C_COMPILER_LAUNCHER=ccache -DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
  # shellcheck disable=SC2086  # the flags are words
  cmake -S "$root/src" -B "$build" -G Ninja $flags "${launcher[@]}" >"$build.configure.log" 2>&1 ||
    die "configure failed (see $build.configure.log)"
  echo "$flags" >"$build/.flags"
fi
if [[ ! -x "$tool" || "$here/activations.cpp" -nt "$tool" || ! -f "$build/src/libllama.a" ]]; then
  echo "llamacpp-dump: building llama.cpp's library (-j2; the first time takes a while)" >&2
  cmake --build "$build" -j 2 --target llama ggml >"$build.build.log" 2>&1 || die "build failed (see $build.build.log)"
  mkdir -p "$build/bin"
  c++ -O2 -std=c++17 "$here/activations.cpp" -I"$root/src/include" -I"$root/src/ggml/include" -o "$tool" \
    "$build/src/libllama.a" "$build/ggml/src/libggml.a" "$build/ggml/src/libggml-cpu.a" \
    "$build/ggml/src/libggml-base.a" -fopenmp -lpthread -ldl || die "cannot compile activations.cpp"
fi

rm -rf "$out/llama.cpp" "$out/tessera"
mkdir -p "$out/llama.cpp" "$out/tessera"
"$tool" "$model" "$out/llama.cpp" 1 "$kv" "$fa" "${ids[@]}" >"$out/llama.cpp.txt" 2>"$out/llama.cpp.log" ||
  die "llama.cpp failed (see $out/llama.cpp.log)"

log="$out/tessera.log"
TESSERA_DUMP_ACTIVATIONS="$out/tessera" "$tessera" serve --model "$model" --port 0 --backend cpu --threads 1 \
  --served-model-name dump --max-num-seqs 1 --kv-dtype "$kv" >"$log" 2>&1 &
pid=$!
trap 'kill "$pid" 2>/dev/null || true' EXIT
port=""
for _ in $(seq 3000); do
  port="$(grep -o 'listening on [^ ]*:[0-9]*' "$log" | grep -o '[0-9]*$' || true)"
  [[ -n "$port" ]] && break
  kill -0 "$pid" 2>/dev/null || die "tessera serve exited (see $log)"
  sleep 0.2
done
[[ -n "$port" ]] || die "tessera serve did not listen within 10 minutes (see $log)"
prompt="[$(IFS=,; echo "${ids[*]}")]"
curl -sf "http://127.0.0.1:$port/v1/completions" -H 'Content-Type: application/json' \
  -d "{\"model\":\"dump\",\"prompt\":$prompt,\"max_tokens\":1,\"temperature\":0,\"logprobs\":1}" >"$out/tessera.json" ||
  die "the completion request failed (see $log)"
kill "$pid" 2>/dev/null || true
wait "$pid" 2>/dev/null || true
trap - EXIT

echo "llama.cpp first step: $(head -1 "$out/llama.cpp.txt")"
echo "tessera first token log-probability: $(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["choices"][0]["logprobs"]["token_logprobs"][0])' "$out/tessera.json")"
python3 "$here/compare.py" "$out/llama.cpp" "$out/tessera"
