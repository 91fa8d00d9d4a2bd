#!/usr/bin/env bash
# Tessera's activations against llama.cpp's, point by point, on one synth file (scripts/llamacpp-dump/): stories15M
# at its real width, 2 layers, f32 weights, both engines with an f32 KV cache and llama.cpp's exact attention. Every
# point of every layer (attn_norm, Qcur, Kcur, Vcur, kqv_out, ffn_inp, ffn_norm, ffn_out, l_out, result_norm) must
# agree to 1e-5 relative (measured: about 6e-7); and the control: Tessera's activations of a model one seed apart
# must not pass the same bound against llama.cpp's.
# usage: activation_parity.sh TESSERA_BIN   Exits 77 (ctest: skipped) when llama.cpp is not built.
set -euo pipefail
repo="$(cd "$(dirname "$0")/../.." && pwd)"
tessera="$1"
root="${TESSERA_CACHE:-$HOME/.cache/tessera}/llama.cpp/${TESSERA_LLAMACPP_VERSION:-3.21.1}"
if [[ ! -f "$root/build/.tessera-built" ]]; then
  echo "SKIPPED: llama.cpp is not built (bash scripts/llamacpp.sh)"
  exit 77
fi
work="$(mktemp -d /tmp/tessera-activation-parity.XXXXXX)"
trap 'rm -rf "$work"' EXIT
for seed in 7 8; do
  "$tessera" synth --shape stories15M --format gguf --dtype f32 --layers 2 --max-seq-len 512 --seed "$seed" \
    --rare-byte-tokens --out "$work/seed$seed.gguf" 2>&1 | head -1
done
ids=(100 2000 3000 17 999 12345 4242 31337 55 8080)
TESSERA_BIN="$tessera" bash "$repo/scripts/llamacpp-dump/run.sh" "$work/seed7.gguf" "$work/same" f32 0 "${ids[@]}"
python3 "$repo/scripts/llamacpp-dump/compare.py" "$work/same/llama.cpp" "$work/same/tessera" --max 1e-5

TESSERA_BIN="$tessera" bash "$repo/scripts/llamacpp-dump/run.sh" "$work/seed8.gguf" "$work/other" f32 0 "${ids[@]}" \
  >/dev/null
if python3 "$repo/scripts/llamacpp-dump/compare.py" "$work/same/llama.cpp" "$work/other/tessera" --max 1e-5 \
  >"$work/control.txt"; then
  cat "$work/control.txt"
  echo "FAILED: a model one seed apart passed the same bound" >&2
  exit 1
fi
echo "control: $(tail -1 "$work/control.txt")"
