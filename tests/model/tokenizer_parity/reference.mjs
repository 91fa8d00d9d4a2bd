// Reference token ids for the parity test: Hugging Face's own JavaScript tokenizer on the Llama-2 and
// Qwen3 tokenizer.json files, and gpt-3-encoder's own encoder for GPT-2.
// Usage: node reference.mjs FETCH_DIR CORPUS.jsonl OUT.json
import { readFileSync, writeFileSync } from "node:fs";
import { createRequire } from "node:module";
import { join } from "node:path";
import { pathToFileURL } from "node:url";

const [dir, corpusPath, outPath] = process.argv.slice(2);
const { Tokenizer } = await import(pathToFileURL(join(dir, "hf-tokenizers/package/dist/tokenizers.mjs")).href);
const corpus = readFileSync(corpusPath, "utf8").split("\n").filter((l) => l.length > 0).map((l) => JSON.parse(l));

const corpusBytes = corpus.reduce((n, s) => n + Buffer.byteLength(s, "utf8"), 0);
const mbps = {};

// Encode throughput of the reference itself on the same corpus (at least 300 ms of passes), for the report.
function time(key, encode) {
  const t0 = performance.now();
  let passes = 0;
  while (performance.now() - t0 < 300 || passes < 3) {
    for (const s of corpus) encode(s);
    ++passes;
  }
  mbps[key] = (corpusBytes * passes) / ((performance.now() - t0) / 1000) / 1e6;
}

function hf(name) {
  const tj = JSON.parse(readFileSync(join(dir, name, "package/models/tokenizer.json"), "utf8"));
  const tc = JSON.parse(readFileSync(join(dir, name, "package/models/tokenizer_config.json"), "utf8"));
  const t = new Tokenizer(tj, tc);
  const ids = corpus.map((s) => Array.from(t.encode(s, { add_special_tokens: false }).ids, Number));
  time(name, (s) => t.encode(s, { add_special_tokens: false }));
  return ids;
}

const require = createRequire(import.meta.url);
const gpt2 = require(join(dir, "gpt2/package/index.js"));
const out = { llama2: hf("llama2"), qwen3: hf("qwen3"), gpt2: corpus.map((s) => gpt2.encode(s)) };
time("gpt2", (s) => gpt2.encode(s));
out.reference_mbps = mbps;
writeFileSync(outPath, JSON.stringify(out));
