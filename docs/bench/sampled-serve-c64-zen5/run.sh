#!/bin/bash
# Sampled serving at concurrency 64: llama-server (80fb11a) vs tessera serve, same token-id prompts (fresh each
# repeat, the same for both), alternating; both up at once, one idle while the other is measured.
M=~/.cache/tessera/bench-vs-llamacpp/llama3.2-1b-l4-s1-Q4_K_M.gguf
T=${NEW:-/work/main/build/release/bin/tessera}
L=${LLAMA_BIN:-/root/.cache/tessera/llama.cpp/3.21.1/build/bin}
OUT=${OUT:-/tmp/sv3}
BODY='{"temperature":0.8,"top_p":0.95,"top_k":0,"min_p":0}'
$L/llama-server -m $M --host 127.0.0.1 --port 18091 -np 64 -c 45056 -t 2 --no-webui -fa on > $OUT/llama-server.log 2>&1 &
$T serve --model $M --port 18092 --backend cpu --threads 2 --max-num-seqs 64 --served-model-name bench > $OUT/tessera-serve.log 2>&1 &
sleep 15
for rep in 1 2 3; do for port in 18091 18092; do
  tag=$( [ $port = 18091 ] && echo llama-server || echo tessera ); f=$OUT/$tag-r$rep.json
  l=$(cut -d' ' -f1 /proc/loadavg)
  $T bench serve --url http://127.0.0.1:$port --input-len 512 --output-len 128 --num-prompts 64 --max-concurrency 64 \
    --seed $((200 + rep)) --vocab-size 128256 --extra-body "$BODY" --out $f > $OUT/$tag-r$rep.txt 2>&1
  python3 -c "import json;d=json.load(open('$f'));print('$tag', $rep, {k:round(v,1) for k,v in d.items() if k in ('completed','median_tpot_ms','median_ttft_ms','output_throughput')}, 'load $l')"
done; done
kill %1 %2
