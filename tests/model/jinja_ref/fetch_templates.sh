#!/usr/bin/env bash
# Makes llama.cpp's chat templates (models/templates/*.jinja) available at the cache path the tests read:
# $TESSERA_LLAMACPP_SRC (default ~/.cache/tessera/llama.cpp/src). llama.cpp's source comes the way the
# project gets it everywhere (docs/architecture.md): `npm pack node-llama-cpp@3.21.1`, whose
# package/llama/gitRelease.bundle is a git bundle of the source. Does nothing when the folder exists.
set -euo pipefail
src="${TESSERA_LLAMACPP_SRC:-$HOME/.cache/tessera/llama.cpp/src}"
if [ -d "$src/models/templates" ]; then exit 0; fi
if [ -e "$src" ]; then
  echo "fetch_templates: $src exists but has no models/templates; remove it to fetch again" >&2
  exit 1
fi
cache="$(dirname "$src")"
mkdir -p "$cache"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
(cd "$work" && npm pack node-llama-cpp@3.21.1 --silent >/dev/null && tar xzf node-llama-cpp-3.21.1.tgz)
rm -rf "$src.tmp"
git clone -q "$work/package/llama/gitRelease.bundle" "$src.tmp"
mv "$src.tmp" "$src"
echo "fetch_templates: llama.cpp source in $src"
