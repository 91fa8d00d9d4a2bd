#!/usr/bin/env bash
# Tessera side by side with llama.cpp on the same GGUF files and the same machine (issue 16 item 7).
#
# 1. llama.cpp from scripts/llamacpp.sh (node-llama-cpp's git bundle, built into a cache folder with this CPU's ISA
#    sets named one by one, AMX off; the summary names the set).
# 2. Models from `tessera synth` (llama2-style stories110M as f32, the qwen2.5-0.5b shape as f16: its
#    151936-token vocabulary makes an f32 file 2 GB), each quantized by llama.cpp's own `llama-quantize` to
#    every preset in PRESETS. Files are cached under WORK (keyed by shape, preset and seed).
# 3. Single stream, for each shape x preset x THREADS, REPEATS times, the two engines alternating, for each depth D
#    in DEPTHS and each prompt length P in PREFILL (both "512" by default):
#    decode:  `llama-bench -p 0 -n 32 -d D`       vs `tessera bench generate --prompt-tokens D --gen-tokens 32`
#    prefill: `llama-bench -p P -n 0`             vs the same `tessera bench generate` run's prefill when P is one of
#             DEPTHS, else `tessera bench generate --prompt-tokens P --gen-tokens 1`
#    Lengths over 2048 run without warm-up on both sides (llama-bench --no-warmup, tessera --warmup 0): a warm-up
#    there is a whole second prefill. FA=on|off|auto passes `-fa FA` to llama-bench and llama-server (unset: their
#    default). A shape synthesized for lengths over 2048 gets a longer context (a power of two), cached as -cN.
# 4. Serving, SERVE_SHAPE at SERVE_PRESET: `llama-server -np N` and `tessera serve --max-num-seqs N` (both up at
#    once, idle while the other is measured) under the same `tessera bench serve` load (token-id prompts of
#    INPUT_LEN, OUTPUT_LEN tokens, ignore_eos) at each concurrency N in CONCURRENCY, alternating, REPEATS times.
# 5. Writes OUT (default docs/bench/vs-llamacpp): raw/ (every tool's own output), results.jsonl (one line per
#    measurement), summary.md (medians, min-max spread, ratio tessera / llama.cpp), plots/ (`tessera bench plot`
#    of the serving sweeps), and replaces the section between the vs-llamacpp markers in docs/benchmarks.md.
#
# A point Tessera cannot run (e.g. a tensor type it does not load yet) is recorded with Tessera's error and
# the script goes on. Speed needs an idle machine: the load average before every run is recorded.
#
# Usage: scripts/bench-vs-llamacpp.sh            (REPEATS=3, every point: about an hour on 2 idle cores)
#        REPEATS=1 PRESETS="Q8_0" SHAPES=stories110M THREADS=2 CONCURRENCY="1 8" scripts/bench-vs-llamacpp.sh
#        SHAPES="" REPEATS=1 scripts/bench-vs-llamacpp.sh   (serving only: SERVE_SHAPE at SERVE_PRESET)
#        EXTRA_ISAS=avx2 ...   (tessera also with its AVX2 kernels forced, in extra columns)
#        LLAMACPP_ISA=avx2 ...   (both engines as an AVX2-only host runs them: llama.cpp built without AVX-512 or
#          AVX-VNNI by `TESSERA_LLAMACPP_ISA=avx2 scripts/llamacpp.sh`, tessera with TESSERA_CPU_ISA=avx2)
#        SHAPES=llama3.2-1b SHAPE_LAYERS="llama3.2-1b:4" PRESETS=Q4_K_M THREADS=2 DEPTHS="512 4096 16384" \
#          PREFILL="512 8192" FA=on CONCURRENCY="" BENCH_MD="" OUT=docs/bench/vs-llamacpp-longctx \
#          scripts/bench-vs-llamacpp.sh   (long contexts; llama3.1-8b the same, one engine at a time fits 24 GiB)
#        SHAPES="" SERVE_SHAPE=llama3.2-1b SERVE_PRESET=Q4_K_M CONCURRENCY=64 INPUT_LEN=512 OUTPUT_LEN=128 \
#          NUM_PROMPTS=128 FA=on scripts/bench-vs-llamacpp.sh   (serving at concurrency 64)
#        SHAPES=qwen3-30b-a3b SHAPE_LAYERS="qwen3-30b-a3b:4" PRESETS=Q4_K_M QWEN_THREADS=2 CONCURRENCY="" BENCH_MD="" \
#          OUT=docs/bench/vs-llamacpp-moe scripts/bench-vs-llamacpp.sh   (an MoE shape at real width, 4 of its layers)
set -euo pipefail
cd "$(dirname "$0")/.."
root="$PWD"

REPEATS="${REPEATS:-3}"
SHAPES="${SHAPES-stories110M qwen2.5-0.5b}"  # "" : serving only
PRESETS="${PRESETS:-F16 Q8_0 Q4_0 Q4_K_M}"
THREADS="${THREADS:-1 2}"
QWEN_THREADS="${QWEN_THREADS:-2}"  # the qwen shape only at these thread counts (issue 16: 2 threads)
SHAPE_LAYERS="${SHAPE_LAYERS:-}"   # "shape:N ...": write that shape with N layers (the MoE shapes at real width)
EXTRA_ISAS="${EXTRA_ISAS:-}"       # e.g. "avx2": tessera also run with TESSERA_CPU_ISA forced to each
LLAMACPP_ISA="${LLAMACPP_ISA:-native}"  # native, or avx2: both engines limited to AVX2 (see above)
CONCURRENCY="${CONCURRENCY-1 8 32}"  # "" : single stream only
SERVE_SHAPE="${SERVE_SHAPE:-stories110M}"
SERVE_PRESET="${SERVE_PRESET:-Q8_0}"
SERVE_THREADS="${SERVE_THREADS:-2}"
INPUT_LEN="${INPUT_LEN:-256}"
OUTPUT_LEN="${OUTPUT_LEN:-64}"
NUM_PROMPTS="${NUM_PROMPTS:-32}"  # requests per serving run (issue 16: 32 requests 256 in / 64 out)
SERVE_KV="${SERVE_KV:-f16}"        # tessera's KV cache type when serving: llama-server's default is f16
BENCH_MD="${BENCH_MD-docs/benchmarks.md}"  # whose vs-llamacpp section the summary replaces ("" : none)
DEPTHS="${DEPTHS:-512}"    # decode depths
PREFILL="${PREFILL:-512}"  # prefill lengths
FA="${FA:-}"               # llama.cpp's -fa (on, off, auto); unset: its default
GEN=32
SEED=1
OUT="${OUT:-docs/bench/vs-llamacpp}"
WORK="${WORK:-${TESSERA_CACHE:-$HOME/.cache/tessera}/bench-vs-llamacpp}"
tessera="${TESSERA_BIN:-$root/build/release/bin/tessera}"

die() {
  echo "bench-vs-llamacpp: error: $*" >&2
  exit 1
}
log() { echo "bench-vs-llamacpp: $*" >&2; }
[[ "$REPEATS" =~ ^[1-9][0-9]*$ ]] || die "REPEATS must be a positive integer, not '$REPEATS'"
[[ "$NUM_PROMPTS" =~ ^[1-9][0-9]*$ ]] || die "NUM_PROMPTS must be a positive integer, not '$NUM_PROMPTS'"
[[ "$SERVE_KV" == f16 || "$SERVE_KV" == f32 ]] || die "SERVE_KV must be f16 or f32, not '$SERVE_KV'"
[[ -z "$FA" || "$FA" == on || "$FA" == off || "$FA" == auto ]] || die "FA must be on, off or auto, not '$FA'"
for n in $DEPTHS $PREFILL; do [[ "$n" =~ ^[1-9][0-9]*$ ]] || die "DEPTHS and PREFILL hold positive integers, not '$n'"; done
fa_args=()
[[ -n "$FA" ]] && fa_args=(-fa "$FA")
[[ -x "$tessera" ]] || die "no tessera binary at $tessera (run: bash scripts/build release)"
command -v python3 >/dev/null || die "python3 is needed to summarize (scripts/install-deps installs it)"
[[ "$LLAMACPP_ISA" == native || "$LLAMACPP_ISA" == avx2 ]] || die "LLAMACPP_ISA must be native or avx2, not '$LLAMACPP_ISA'"
bin="$(TESSERA_LLAMACPP_ISA="$LLAMACPP_ISA" bash scripts/llamacpp.sh)" || die "scripts/llamacpp.sh could not provide llama.cpp"
tessera_isa=""
if [[ "$LLAMACPP_ISA" == avx2 ]]; then
  export TESSERA_CPU_ISA=avx2  # every tessera run below, serving included
  tessera_isa=avx2
fi
mkdir -p "$WORK" "$OUT/raw" "$OUT/plots"
results="$OUT/results.jsonl"
: >"$results"
load1() { cut -d' ' -f1 /proc/loadavg; }

# One JSON line per measurement: engine, what, shape, preset, threads, rep, value (tok/s) or error.
record() {
  python3 - "$results" "$@" <<'EOF'
import json, sys
path, engine, what, shape, preset, threads, rep, value, load, raw = sys.argv[1:11]
line = {"engine": engine, "what": what, "shape": shape, "preset": preset, "threads": int(threads),
        "rep": int(rep), "load_1min": float(load), "raw": raw}
if len(sys.argv) > 11:
    line["depth"] = int(sys.argv[11])  # decode depth or prefill length
try:
    line["tok_s"] = float(value)
except ValueError:
    line["error"] = value
with open(path, "a") as f:
    f.write(json.dumps(line) + "\n")
EOF
}

# The tok/s of llama-bench's one test in a JSON output file.
llama_ts() {
  python3 -c 'import json,sys; t=json.load(open(sys.argv[1])); print(t[0]["avg_ts"])' "$1" 2>/dev/null || echo "no result"
}
# The median tok/s on tessera bench generate's "prefill"/"decode" line, or its error line.
tessera_ts() {
  local v
  v="$(awk -v k="$2" '$1 == k && $2 == "tok/s" && $3 == "median" {print $4}' "$1")"
  if [[ -n "$v" ]]; then echo "$v"; else grep -m1 -o 'error: .*' "$1" | cut -c1-200 || echo "no result"; fi
}

layers_of() {  # shape -> its SHAPE_LAYERS count, or nothing
  local e
  for e in $SHAPE_LAYERS; do [[ "${e%%:*}" == "$1" ]] && echo "${e#*:}"; done
  return 0
}
# The context a synthesized model needs: 2048 (today's files) unless a depth or prefill length asks for more.
synth_ctx=2048
for n in $DEPTHS; do while ((n + GEN > synth_ctx)); do synth_ctx=$((synth_ctx * 2)); done; done
for n in $PREFILL; do while ((n + 1 > synth_ctx)); do synth_ctx=$((synth_ctx * 2)); done; done
model_file() {  # shape preset -> path (writing it on first use)
  local shape="$1" preset="$2" src_dtype=f32 layers key ctx_key=""
  # f16 sources for the large vocabularies (an f32 file of the llama3 shapes' 128256 x dim embeddings is 1-4 GB).
  [[ "$shape" == qwen* || "$shape" == gpt-oss* || "$shape" == mixtral* || "$shape" == llama3* || "$shape" == gemma4* ]] &&
    src_dtype=f16
  layers="$(layers_of "$shape")"
  ((synth_ctx > 2048)) && ctx_key="-c$synth_ctx"
  key="$shape${layers:+-l$layers}$ctx_key"
  local src="$WORK/$key-s$SEED-$src_dtype.gguf" out="$WORK/$key-s$SEED-$preset.gguf"
  if [[ ! -s "$src" ]]; then
    log "tessera synth $shape ($src_dtype${layers:+, $layers layers})"
    "$tessera" synth --shape "$shape" --format gguf --dtype "$src_dtype" --seed "$SEED" --max-seq-len "$synth_ctx" \
      ${layers:+--layers "$layers"} --out "$src" 2>"$WORK/$shape-synth.log" ||
      die "tessera synth failed: $(cat "$WORK/$shape-synth.log")"
  fi
  if [[ ! -s "$out" ]]; then
    log "llama-quantize $shape $preset"
    "$bin/llama-quantize" "$src" "$out.tmp" "$preset" >"$WORK/$shape-$preset-quantize.log" 2>&1 ||
      die "llama-quantize $preset failed (see $WORK/$shape-$preset-quantize.log)"
    mv "$out.tmp" "$out"
  fi
  echo "$out"
}
vocab_of() { grep -o 'vocab [0-9]*' "$WORK/$1-synth.log" | head -1 | cut -d' ' -f2; }

# --- single stream ---------------------------------------------------------------------------------------
for shape in $SHAPES; do
  threads_list="$THREADS"
  [[ "$shape" == qwen* || "$shape" == gpt-oss* || "$shape" == mixtral* ]] && threads_list="$QWEN_THREADS"
  for preset in $PRESETS; do
    model="$(model_file "$shape" "$preset")"
    for t in $threads_list; do
      for rep in $(seq 1 "$REPEATS"); do
        base="$shape-$preset-t$t-r$rep"
        # Decode at each depth; the tessera run's prefill counts for PREFILL too when the lengths match.
        for depth in $DEPTHS; do
          tag="$base"
          ((depth == 512)) || tag="$base-d$depth"
          warm=()
          twarm=()
          ((depth > 2048)) && warm=(--no-warmup) && twarm=(--warmup 0)
          l="$(load1)"
          "$bin/llama-bench" -m "$model" -t "$t" -p 0 -n "$GEN" -d "$depth" -r 1 "${fa_args[@]}" "${warm[@]}" -o json \
            >"$OUT/raw/llama-bench-decode-$tag.json" 2>"$WORK/llama-bench.err" || true
          record llama.cpp decode "$shape" "$preset" "$t" "$rep" "$(llama_ts "$OUT/raw/llama-bench-decode-$tag.json")" \
            "$l" "raw/llama-bench-decode-$tag.json" "$depth"
          for isa in "" $EXTRA_ISAS; do  # "": the default kernels; then each forced variant, reported beside it
            engine="tessera${isa:+-$isa}"
            f="raw/$engine-generate-$tag.txt"
            l="$(load1)"
            TESSERA_CPU_ISA="${isa:-${TESSERA_CPU_ISA:-}}" "$tessera" bench generate --model "$model" --threads "$t" \
              --prompt-tokens "$depth" --gen-tokens "$GEN" --repeat 1 "${twarm[@]}" --no-ceilings >"$OUT/$f" 2>&1 || true
            record "$engine" decode "$shape" "$preset" "$t" "$rep" "$(tessera_ts "$OUT/$f" decode)" "$l" "$f" "$depth"
            if [[ " $PREFILL " == *" $depth "* ]]; then
              record "$engine" prefill "$shape" "$preset" "$t" "$rep" "$(tessera_ts "$OUT/$f" prefill)" "$l" "$f" "$depth"
            fi
          done
        done
        for plen in $PREFILL; do
          tag="$base"
          ((plen == 512)) || tag="$base-p$plen"
          warm=()
          twarm=()
          ((plen > 2048)) && warm=(--no-warmup) && twarm=(--warmup 0)
          l="$(load1)"
          "$bin/llama-bench" -m "$model" -t "$t" -p "$plen" -n 0 -r 1 "${fa_args[@]}" "${warm[@]}" -o json \
            >"$OUT/raw/llama-bench-prefill-$tag.json" 2>"$WORK/llama-bench.err" || true
          record llama.cpp prefill "$shape" "$preset" "$t" "$rep" \
            "$(llama_ts "$OUT/raw/llama-bench-prefill-$tag.json")" "$l" "raw/llama-bench-prefill-$tag.json" "$plen"
          [[ " $DEPTHS " == *" $plen "* ]] && continue  # measured by the decode run above
          for isa in "" $EXTRA_ISAS; do
            engine="tessera${isa:+-$isa}"
            f="raw/$engine-prefill-$tag.txt"
            l="$(load1)"
            TESSERA_CPU_ISA="${isa:-${TESSERA_CPU_ISA:-}}" "$tessera" bench generate --model "$model" --threads "$t" \
              --prompt-tokens "$plen" --gen-tokens 1 --repeat 1 "${twarm[@]}" --no-ceilings >"$OUT/$f" 2>&1 || true
            record "$engine" prefill "$shape" "$preset" "$t" "$rep" "$(tessera_ts "$OUT/$f" prefill)" "$l" "$f" "$plen"
          done
        done
        log "$base done (load $l)"
      done
    done
  done
done

# --- serving ---------------------------------------------------------------------------------------------
pids=()
cleanup() {
  local p
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
  pids=()
}
trap cleanup EXIT
wait_url() {  # log-file -> URL once "listening on http://..." appears and /health answers 200
  local url="" i
  for i in $(seq 1 600); do
    url="$(grep -o 'listening on http://[0-9.]*:[0-9]*' "$1" | head -1 | cut -d' ' -f3 || true)"
    if [[ -n "$url" ]] && python3 -c 'import sys, urllib.request; urllib.request.urlopen(sys.argv[1] + "/health", timeout=2)' \
      "$url" >/dev/null 2>&1; then
      echo "$url"
      return 0
    fi
    sleep 0.2
  done
  return 1
}

if [[ -n "$CONCURRENCY" ]]; then
  model="$(model_file "$SERVE_SHAPE" "$SERVE_PRESET")"
  vocab="$(vocab_of "$SERVE_SHAPE")"
  for engine in llama-server tessera; do
    printf '{"label": "%s", "mode": "concurrency", "repeats": %s, "points": [' "$engine" "$REPEATS" \
      >"$OUT/raw/$engine-sweep.json"
  done
  first=1
  for c in $CONCURRENCY; do
    ctx=$((c * (INPUT_LEN + OUTPUT_LEN + 64)))
    "$bin/llama-server" -m "$model" --host 127.0.0.1 --port 0 -np "$c" -c "$ctx" -t "$SERVE_THREADS" --no-webui "${fa_args[@]}" \
      >"$WORK/llama-server-c$c.log" 2>&1 &
    pids+=($!)
    "$tessera" serve --model "$model" --port 0 --backend cpu --threads "$SERVE_THREADS" --max-num-seqs "$c" \
      --kv-dtype "$SERVE_KV" --served-model-name bench >"$WORK/tessera-serve-c$c.log" 2>&1 &
    pids+=($!)
    lurl="$(wait_url "$WORK/llama-server-c$c.log")" || die "llama-server did not come up (see $WORK/llama-server-c$c.log)"
    turl="$(wait_url "$WORK/tessera-serve-c$c.log")" || die "tessera serve did not come up (see $WORK/tessera-serve-c$c.log)"
    prompts="$NUM_PROMPTS"
    declare -A runs=([llama-server]="" [tessera]="")
    declare -A loads=([llama-server]="" [tessera]="")
    for rep in $(seq 1 "$REPEATS"); do
      for engine in llama-server tessera; do
        url="$lurl"
        [[ "$engine" == tessera ]] && url="$turl"
        f="serve-$engine-c$c-r$rep.json"
        l="$(load1)"
        "$tessera" bench serve --url "$url" --input-len "$INPUT_LEN" --output-len "$OUTPUT_LEN" --num-prompts "$prompts" \
          --max-concurrency "$c" --seed "$rep" --vocab-size "$vocab" --out "$OUT/raw/$f" \
          >"$OUT/raw/serve-$engine-c$c-r$rep.txt" 2>&1 ||
          # Failed requests are part of the result (the summary's "failed" column); no result file is not.
          { [[ -s "$OUT/raw/$f" ]] || die "bench serve against $engine failed (see $OUT/raw/serve-$engine-c$c-r$rep.txt)"
            log "warning: $engine c=$c rep $rep: $(tail -1 "$OUT/raw/serve-$engine-c$c-r$rep.txt")"; }
        runs[$engine]+="${runs[$engine]:+, }\"$f\""
        loads[$engine]+="${loads[$engine]:+, }$l"
        log "serving $engine c=$c rep $rep done (load $l)"
      done
    done
    for engine in llama-server tessera; do
      printf '%s{"value": %s, "runs": [%s], "load_1min": [%s]}' "$([[ $first == 1 ]] || echo ', ')" "$c" \
        "${runs[$engine]}" "${loads[$engine]}" >>"$OUT/raw/$engine-sweep.json"
    done
    first=0
    cleanup
  done
  for engine in llama-server tessera; do echo ']}' >>"$OUT/raw/$engine-sweep.json"; done
  "$tessera" bench plot --out-dir "$OUT/plots" "$OUT/raw/llama-server-sweep.json" "$OUT/raw/tessera-sweep.json" >/dev/null
fi

# --- summary ---------------------------------------------------------------------------------------------
llama_commit="$(git -C "$bin/../../src" rev-parse --short HEAD 2>/dev/null || echo unknown)"
python3 scripts/bench-vs-llamacpp-summary.py --results "$results" --out "$OUT" --serve-dir "$OUT/raw" \
  --concurrency "$CONCURRENCY" --cpu "$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')" \
  --nproc "$(nproc)" --llama-commit "$llama_commit" --llama-isa "$(cat "$bin/../.tessera-isa" 2>/dev/null || echo unknown)" --tessera-commit "$(git rev-parse --short HEAD)" --tessera-isa "$tessera_isa" \
  --command "${tessera_isa:+LLAMACPP_ISA=$LLAMACPP_ISA }${FA:+FA=$FA }DEPTHS=\"$DEPTHS\" PREFILL=\"$PREFILL\" NUM_PROMPTS=$NUM_PROMPTS SERVE_KV=$SERVE_KV REPEATS=$REPEATS SHAPES=\"$SHAPES\"${SHAPE_LAYERS:+ SHAPE_LAYERS=\"$SHAPE_LAYERS\"} PRESETS=\"$PRESETS\" THREADS=\"$THREADS\" QWEN_THREADS=\"$QWEN_THREADS\" EXTRA_ISAS=\"$EXTRA_ISAS\" CONCURRENCY=\"$CONCURRENCY\" SERVE_SHAPE=$SERVE_SHAPE SERVE_PRESET=$SERVE_PRESET SERVE_THREADS=$SERVE_THREADS INPUT_LEN=$INPUT_LEN OUTPUT_LEN=$OUTPUT_LEN scripts/bench-vs-llamacpp.sh" \
  --serve-desc "$SERVE_SHAPE $SERVE_PRESET, $SERVE_THREADS threads, $INPUT_LEN in / $OUTPUT_LEN out, $NUM_PROMPTS requests, tessera KV $SERVE_KV" \
  ${BENCH_MD:+--benchmarks-md "$BENCH_MD"}
log "wrote $OUT/summary.md and $OUT/plots/${BENCH_MD:+, and the vs-llamacpp section of $BENCH_MD}"
