#!/bin/bash
# Sampled serving, old (8ff8d5d, rows drawn one after another) vs new (rows drawn on the host threads), prompts cached (decode-bound), alternating.
M=~/.cache/tessera/bench-vs-llamacpp/llama3.2-1b-l4-s1-Q4_K_M.gguf
T=$NEW
$OLD serve --model $M --port 18081 --backend cpu --threads 2 --max-num-seqs 64 --served-model-name bench > $OUT/serve-old.log 2>&1 &
$T serve --model $M --port 18082 --backend cpu --threads 2 --max-num-seqs 64 --served-model-name bench > $OUT/serve-new.log 2>&1 &
sleep 10
for port in 18081 18082; do $T bench serve --url http://127.0.0.1:$port --input-len 512 --output-len 1 --num-prompts 64 --max-concurrency 64 --seed 7 > /dev/null 2>&1; done
# The first round (summary-rows-on-threads.txt) took the three bodies below; the second
# (summary-with-thread-buffers.txt) the top_p and temperature bodies only.
for body in '{"temperature":0}' '{"temperature":0.8}' '{"temperature":0.8,"top_p":0.95}'; do
 for rep in 1 2 3; do for port in 18081 18082; do
  tag=$( [ $port = 18081 ] && echo old || echo new ); f=$OUT/$tag-$(echo $body | tr -dc 'a-z0-9.')-r$rep.json
  l=$(cut -d' ' -f1 /proc/loadavg)
  $T bench serve --url http://127.0.0.1:$port --input-len 512 --output-len 128 --num-prompts 64 --max-concurrency 64 --seed 7 --extra-body "$body" --out $f > /dev/null 2>&1
  python3 -c "import json;d=json.load(open('$f'));print('$tag', '$body', $rep, {k:round(v,1) for k,v in d.items() if k in ('median_tpot_ms','median_ttft_ms','output_throughput')}, 'load $l')"
 done; done
done
kill %1 %2
