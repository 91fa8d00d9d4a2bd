#!/usr/bin/env bash
# Obtains and builds llama.cpp, the project's reference peer (issues 16 and 17), and prints the folder holding
# its binaries.
#
# The only registry this project's machines reach for third-party source is npm, so llama.cpp comes the way
# node-llama-cpp ships it: `npm pack node-llama-cpp@VERSION` holds llama/gitRelease.bundle, a git bundle of the
# llama.cpp release that package version was built against; cloning that bundle gives the source. Everything
# lives under ${TESSERA_CACHE:-$HOME/.cache/tessera}/llama.cpp/VERSION/ (tarball, unpacked package, src/,
# build/), so a different version never reuses a stale tree. Only the four tools Tessera compares against are
# built: llama-server, llama-quantize, llama-bench, llama-tokenize (Release; GGML_NATIVE=ON is fine for a peer
# that only ever runs on the machine that built it; no curl/openssl, no web UI download, no tests/examples).
#
# Idempotent: once the four binaries exist and the stamp file matches the build settings, a second run only
# checks and prints (well under a second). Any failure exits non-zero with a message saying which step failed.
#
# Usage: scripts/llamacpp.sh   (on success stdout is exactly one line: the binaries' folder)
# Environment: TESSERA_CACHE (cache root), TESSERA_LLAMACPP_VERSION (node-llama-cpp version, default below),
#              TESSERA_LLAMACPP_JOBS (build parallelism, default 2).
set -euo pipefail

version="${TESSERA_LLAMACPP_VERSION:-3.21.1}"
cache_root="${TESSERA_CACHE:-$HOME/.cache/tessera}"
root="$cache_root/llama.cpp/$version"
jobs="${TESSERA_LLAMACPP_JOBS:-2}"
tools=(llama-server llama-quantize llama-bench llama-tokenize)
bin_dir="$root/build/bin"

die() {
  echo "llamacpp.sh: error: $*" >&2
  exit 1
}
log() { echo "llamacpp.sh: $*" >&2; }

if [[ ! "$version" =~ ^[0-9]+\.[0-9]+\.[0-9]+$ ]]; then
  die "TESSERA_LLAMACPP_VERSION='$version' is not a plain x.y.z package version"
fi

# The settings the build was made with; a change (e.g. of the version or of these flags) rebuilds.
cmake_flags=(
  -DCMAKE_BUILD_TYPE=Release
  -DBUILD_SHARED_LIBS=OFF
  -DGGML_NATIVE=ON
  -DLLAMA_CURL=OFF
  -DLLAMA_OPENSSL=OFF
  -DLLAMA_BUILD_TESTS=OFF
  -DLLAMA_BUILD_EXAMPLES=OFF
  -DLLAMA_BUILD_TOOLS=ON
  -DLLAMA_BUILD_SERVER=ON
  -DLLAMA_BUILD_APP=OFF
  -DLLAMA_BUILD_UI=OFF
  -DLLAMA_USE_PREBUILT_UI=OFF
)
stamp="$root/build/.tessera-built"
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
if command -v ninja >/dev/null 2>&1 && [[ ! -f "$root/build/Makefile" ]]; then generator=(-G Ninja); fi
log "configuring llama.cpp in $root/build"
cmake -S "$src" -B "$root/build" "${generator[@]}" "${cmake_flags[@]}" "${launcher[@]}" \
  >"$root/configure.log" 2>&1 || die "cmake configure failed (see $root/configure.log)"
log "building ${tools[*]} with -j$jobs (first build takes a while; log in $root/build.log)"
cmake --build "$root/build" -j "$jobs" --target "${tools[@]}" >"$root/build.log" 2>&1 ||
  die "build failed (last lines of $root/build.log:
$(tail -n 20 "$root/build.log"))"
for t in "${tools[@]}"; do
  [[ -x "$bin_dir/$t" ]] || die "build finished but $bin_dir/$t is missing"
done
echo "$stamp_text" >"$stamp"
log "built ${tools[*]} in $bin_dir"
echo "$bin_dir"
