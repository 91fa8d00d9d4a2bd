#!/usr/bin/env bash
# Obtains and builds llama.cpp, the project's reference peer (issues 16, 17 and 27), and prints the folder holding
# its binaries.
#
# The only registry this project's machines reach for third-party source is npm, so llama.cpp comes the way
# node-llama-cpp ships it: `npm pack node-llama-cpp@VERSION` holds llama/gitRelease.bundle, a git bundle of the
# llama.cpp release that package version was built against; cloning that bundle gives the source. Everything
# lives under ${TESSERA_CACHE:-$HOME/.cache/tessera}/llama.cpp/VERSION/ (tarball, unpacked package, src/,
# build/), so a different version never reuses a stale tree. Only the tools Tessera compares against are built:
# llama-server, llama-quantize, llama-bench, llama-tokenize, and llama-convert-llama2c-to-ggml (llama.cpp's own
# writer of GGUF files from llama2.c checkpoints, used by the format tests).
#
# Instruction sets: never GGML_NATIVE. The machines of this project's kind change between sessions (Zen 3 with AVX2
# only, Zen 4 with AVX-512, Intel Xeon with AMX), and ggml's AMX matmul segfaults on the Intel ones
# (ggml::cpu::amx::tensor_traits::compute_forward, for Q8_0/Q4_0/Q6_K/Q4_K_M; issue 27). So the ISA flags are read
# from /proc/cpuinfo and passed one by one: FMA/F16C/BMI2/AVX/AVX2, AVX-VNNI, and AVX-512 F/CD/VL/DQ/BW with
# VBMI/VNNI/BF16 where the CPU has them; AMX always off. The flag set is part of the cache stamp, so a machine of
# another kind rebuilds, and it is written to build/.tessera-isa for the benchmark summaries to name. After a
# build, a smoke run (llama-bench on a small Q8_0 and Q4_K_M file) must pass before the stamp is written.
#
# Idempotent: once the binaries exist and the stamp matches the build settings and this CPU's flags, a second run
# only checks and prints (well under a second). Any failure exits non-zero with a message saying which step failed.
#
# Usage: scripts/llamacpp.sh   (on success stdout is exactly one line: the binaries' folder)
#        scripts/llamacpp.sh --isa   (prints the ISA flag set this CPU gets, and exits)
# Environment: TESSERA_CACHE (cache root), TESSERA_LLAMACPP_VERSION (node-llama-cpp version, default below),
#              TESSERA_LLAMACPP_JOBS (build parallelism, default 2), TESSERA_BIN (the tessera binary that writes
#              the smoke run's model; default build/release/bin/tessera beside this script),
#              TESSERA_LLAMACPP_ISA (native, the default: every set this CPU has; avx2: AVX2/FMA/F16C/BMI2 only,
#              no AVX-512 or AVX-VNNI, built into build-avx2/ beside the native build: llama.cpp as an AVX2-only
#              host runs it, the peer of Tessera's forced AVX2 kernels in scripts/bench-vs-llamacpp.sh).
set -euo pipefail

version="${TESSERA_LLAMACPP_VERSION:-3.21.1}"
cache_root="${TESSERA_CACHE:-$HOME/.cache/tessera}"
root="$cache_root/llama.cpp/$version"
jobs="${TESSERA_LLAMACPP_JOBS:-2}"
tools=(llama-server llama-quantize llama-bench llama-tokenize llama-convert-llama2c-to-ggml)
isa_cap="${TESSERA_LLAMACPP_ISA:-native}"
case "$isa_cap" in
  native) build="$root/build" ;;
  avx2) build="$root/build-avx2" ;;
  *) echo "llamacpp.sh: error: TESSERA_LLAMACPP_ISA='$isa_cap' is not native or avx2" >&2 && exit 1 ;;
esac
bin_dir="$build/bin"

die() {
  echo "llamacpp.sh: error: $*" >&2
  exit 1
}
log() { echo "llamacpp.sh: $*" >&2; }

if [[ ! "$version" =~ ^[0-9]+\.[0-9]+\.[0-9]+$ ]]; then
  die "TESSERA_LLAMACPP_VERSION='$version' is not a plain x.y.z package version"
fi

# The CPU's instruction sets, as ggml's CMake options, from the flags the kernel reports. AMX stays off on every
# machine (its matmul crashes here); AVX-512 needs all five of F/CD/VL/DQ/BW, as ggml's GGML_AVX512 turns on all five.
cpu_flags=" $(grep -m1 '^flags' /proc/cpuinfo 2>/dev/null | cut -d: -f2) "
has() { [[ "$cpu_flags" == *" $1 "* ]]; }
on_off() { if has "$1"; then echo ON; else echo OFF; fi; }
isa_flags=(
  -DGGML_SSE42="$(on_off sse4_2)" -DGGML_AVX="$(on_off avx)" -DGGML_AVX2="$(on_off avx2)"
  -DGGML_FMA="$(on_off fma)" -DGGML_F16C="$(on_off f16c)" -DGGML_BMI2="$(on_off bmi2)"
  -DGGML_AVX_VNNI="$(on_off avx_vnni)"
)
if [[ "$isa_cap" == avx2 ]]; then
  if ! has avx2 || ! has fma || ! has f16c; then
    echo "llamacpp.sh: error: TESSERA_LLAMACPP_ISA=avx2 but this CPU lacks AVX2, FMA or F16C" >&2
    exit 1
  fi
  isa_flags=(-DGGML_SSE42=ON -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_BMI2="$(on_off bmi2)"
    -DGGML_AVX_VNNI=OFF -DGGML_AVX512=OFF -DGGML_AVX512_VBMI=OFF -DGGML_AVX512_VNNI=OFF -DGGML_AVX512_BF16=OFF)
elif has avx512f && has avx512cd && has avx512vl && has avx512dq && has avx512bw; then
  isa_flags+=(-DGGML_AVX512=ON -DGGML_AVX512_VBMI="$(on_off avx512vbmi)" -DGGML_AVX512_VNNI="$(on_off avx512_vnni)"
    -DGGML_AVX512_BF16="$(on_off avx512_bf16)")
else
  isa_flags+=(-DGGML_AVX512=OFF -DGGML_AVX512_VBMI=OFF -DGGML_AVX512_VNNI=OFF -DGGML_AVX512_BF16=OFF)
fi
isa_flags+=(-DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF -DGGML_AMX_BF16=OFF)
# The short form for messages and summaries: the names of the sets that are on.
isa_summary="$(printf '%s\n' "${isa_flags[@]}" | sed -n 's/^-DGGML_\(.*\)=ON$/\1/p' | tr '\n' ' ' | sed 's/ $//')"
isa_summary="${isa_summary:-none} (AMX off)"
if [[ "${1:-}" == "--isa" ]]; then
  echo "$isa_summary"
  exit 0
fi

# The settings the build was made with; a change (e.g. of the version, of these flags or of the CPU) rebuilds.
cmake_flags=(
  -DCMAKE_BUILD_TYPE=Release
  -DBUILD_SHARED_LIBS=OFF
  -DGGML_NATIVE=OFF
  "${isa_flags[@]}"
  -DLLAMA_CURL=OFF
  -DLLAMA_OPENSSL=OFF
  -DLLAMA_BUILD_TESTS=OFF
  -DLLAMA_BUILD_EXAMPLES=ON
  -DLLAMA_BUILD_TOOLS=ON
  -DLLAMA_BUILD_SERVER=ON
  -DLLAMA_BUILD_APP=OFF
  -DLLAMA_BUILD_UI=OFF
  -DLLAMA_USE_PREBUILT_UI=OFF
)
stamp="$build/.tessera-built"
stamp_text="version=$version flags=${cmake_flags[*]} tools=${tools[*]}"

all_built() {
  [[ -f "$stamp" ]] && [[ "$(cat "$stamp")" == "$stamp_text" ]] || return 1
  local t
  for t in "${tools[@]}"; do [[ -x "$bin_dir/$t" ]] || return 1; done
}

if all_built; then
  log "llama.cpp (node-llama-cpp@$version) already built"
  echo "$bin_dir"
  exit 0
fi

for cmd in npm tar git cmake c++; do
  command -v "$cmd" >/dev/null 2>&1 || die "'$cmd' is not installed (scripts/install-deps installs it)"
done
mkdir -p "$root" || die "cannot create $root"
# One builder at a time (two checkouts' test runs may start together); the second waits, then finds it built.
exec 9>"$root/.lock"
if command -v flock >/dev/null 2>&1; then
  flock 9 || die "cannot lock $root/.lock"
  if all_built; then
    log "llama.cpp (node-llama-cpp@$version) built meanwhile by another run"
    echo "$bin_dir"
    exit 0
  fi
fi

# 1. The package tarball (npm pack writes node-llama-cpp-VERSION.tgz into the current folder).
tgz="$root/node-llama-cpp-$version.tgz"
if [[ ! -s "$tgz" ]]; then
  log "npm pack node-llama-cpp@$version into $root"
  (cd "$root" && npm pack --silent "node-llama-cpp@$version" >"$root/pack.log" 2>&1) ||
    die "npm pack node-llama-cpp@$version failed (see $root/pack.log; is the npm registry reachable?)"
  [[ -s "$tgz" ]] || die "npm pack did not produce $tgz (see $root/pack.log)"
fi

# 2. The bundle inside it, then the source cloned from the bundle.
bundle="$root/package/llama/gitRelease.bundle"
if [[ ! -s "$bundle" ]]; then
  log "unpacking $tgz"
  rm -rf "$root/package"
  tar -xzf "$tgz" -C "$root" package/llama/gitRelease.bundle ||
    die "$tgz has no package/llama/gitRelease.bundle (did node-llama-cpp change how it ships llama.cpp?)"
fi
src="$root/src"
if [[ ! -f "$src/CMakeLists.txt" ]]; then
  log "cloning $bundle into $src"
  rm -rf "$src.tmp"
  git -c advice.detachedHead=false clone --quiet "$bundle" "$src.tmp" || die "git clone of $bundle failed"
  mv "$src.tmp" "$src"
fi

# 3. Configure and build only the four tools.
launcher=()
if command -v ccache >/dev/null 2>&1; then
  launcher=(-DCMAKE_C_COMPILER_LAUNCHER=ccache -DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
fi
generator=()
if command -v ninja >/dev/null 2>&1 && [[ ! -f "$build/Makefile" ]]; then generator=(-G Ninja); fi
log "configuring llama.cpp in $build"
cmake -S "$src" -B "$build" "${generator[@]}" "${cmake_flags[@]}" "${launcher[@]}" \
  >"$root/configure.log" 2>&1 || die "cmake configure failed (see $root/configure.log)"
log "building ${tools[*]} with -j$jobs (first build takes a while; log in $root/build.log)"
cmake --build "$build" -j "$jobs" --target "${tools[@]}" >"$root/build.log" 2>&1 ||
  die "build failed (last lines of $root/build.log:
$(tail -n 20 "$root/build.log"))"
for t in "${tools[@]}"; do
  [[ -x "$bin_dir/$t" ]] || die "build finished but $bin_dir/$t is missing"
done

# 4. The smoke run: llama-bench on small Q8_0 and Q4_K_M files (rows a multiple of 256, so the K-quant and the
#    repacked paths are the ones a real file takes). A peer that crashes here would fail every parity test later
#    with a less helpful message.
smoke="$root/smoke"
mkdir -p "$smoke"
tessera_bin="${TESSERA_BIN:-$(cd "$(dirname "$0")/.." && pwd)/build/release/bin/tessera}"
f32="$smoke/smoke-f32.gguf"
if [[ ! -s "$f32" ]]; then
  if [[ -x "$tessera_bin" ]]; then
    "$tessera_bin" synth --shape stories110M --layers 2 --dim 256 --hidden-dim 768 --format gguf --dtype f32 \
      --seed 27 --out "$f32.tmp" >"$smoke/synth.log" 2>&1 || die "tessera synth for the smoke model failed (see $smoke/synth.log)"
  else
    # Without a tessera build, llama.cpp's own converter writes the repository's stories260K (dim 64) instead.
    model_dir="$(cd "$(dirname "$0")/.." && pwd)/models/stories260K"
    "$bin_dir/llama-convert-llama2c-to-ggml" --copy-vocab-from-model "$model_dir/tok512.bin" \
      --llama2c-model "$model_dir/stories260K.bin" --llama2c-output-model "$f32.tmp" >"$smoke/convert.log" 2>&1 ||
      die "llama-convert-llama2c-to-ggml for the smoke model failed (see $smoke/convert.log)"
  fi
  mv "$f32.tmp" "$f32"
fi
for preset in Q8_0 Q4_K_M; do
  q="$smoke/smoke-$preset.gguf"
  "$bin_dir/llama-quantize" "$f32" "$q" "$preset" 1 >"$smoke/quantize-$preset.log" 2>&1 ||
    die "llama-quantize $preset of the smoke model failed (see $smoke/quantize-$preset.log)"
  set +e
  "$bin_dir/llama-bench" -m "$q" -p 32 -n 8 -r 1 -t 1 -o json >"$smoke/bench-$preset.json" 2>"$smoke/bench-$preset.log"
  rc=$?
  set -e
  if [[ $rc -ne 0 ]]; then
    why="exit status $rc"
    if ((rc > 128)); then why="killed by signal $((rc - 128)) (SIG$(kill -l $((rc - 128)) 2>/dev/null || echo '?'))"; fi
    die "the smoke run of llama-bench on a $preset file failed: $why; llama.cpp was built for this CPU with
  ISA: $isa_summary
(log: $smoke/bench-$preset.log; last lines:
$(tail -n 8 "$smoke/bench-$preset.log"))"
  fi
done
log "smoke run passed (llama-bench on Q8_0 and Q4_K_M; ISA: $isa_summary)"

echo "$isa_summary" >"$build/.tessera-isa"
echo "$stamp_text" >"$stamp"
log "built ${tools[*]} in $bin_dir"
echo "$bin_dir"
