// deploy/grafana/tessera.json against a live cluster and a real Prometheus (Debian's `prometheus` package):
// `tessera up` (router, prefill on cpu, decode on ref), Prometheus scraping the router and both nodes every
// second, traffic from the official OpenAI client, then every PromQL expression of every panel, with Grafana's
// variables filled in as Grafana would, must return at least one finite sample. The `vllm:` series the board
// reads must carry vLLM's names and the `model_name` label. Skips (77), saying why, where prometheus is missing.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawn, execFileSync } from 'node:child_process';
import fs from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import OpenAI from 'openai';

const BIN = process.env.TESSERA_BIN;
const MODEL_DIR = process.env.TESSERA_MODEL_DIR;
const SOURCE_DIR = process.env.TESSERA_SOURCE_DIR;

// vLLM's Prometheus series (vllm/v1/metrics/loggers.py, v0.11), as exposed: counters with `_total`.
const VLLM_NAMES = new Set([
  'vllm:num_requests_running', 'vllm:num_requests_waiting', 'vllm:kv_cache_usage_perc',
  'vllm:prefix_cache_queries_total', 'vllm:prefix_cache_hits_total', 'vllm:num_preemptions_total',
  'vllm:prompt_tokens_total', 'vllm:generation_tokens_total', 'vllm:request_success_total',
  'vllm:request_prompt_tokens', 'vllm:request_generation_tokens', 'vllm:request_params_max_tokens',
  'vllm:request_params_n', 'vllm:iteration_tokens_total', 'vllm:time_to_first_token_seconds',
  'vllm:inter_token_latency_seconds', 'vllm:time_per_output_token_seconds',
  'vllm:request_time_per_output_token_seconds', 'vllm:e2e_request_latency_seconds',
  'vllm:request_queue_time_seconds', 'vllm:request_inference_time_seconds', 'vllm:request_prefill_time_seconds',
  'vllm:request_decode_time_seconds',
]);

const prometheus = ['/usr/bin/prometheus', '/usr/local/bin/prometheus'].find((p) => fs.existsSync(p));
if (!prometheus) {
  console.log('SKIP: no prometheus binary (apt install prometheus; scripts/install-deps does)');
  process.exit(77);
}

function freePort() {
  return new Promise((resolve, reject) => {
    const s = net.createServer();
    s.listen(0, '127.0.0.1', () => { const { port } = s.address(); s.close(() => resolve(port)); });
    s.on('error', reject);
  });
}
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

async function until(what, fn, ms) {
  const end = Date.now() + ms;
  for (;;) {
    try { const v = await fn(); if (v) return v; } catch { /* not yet */ }
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await sleep(250);
  }
}

// Every `expr` of every panel target, recursively (rows may nest panels).
function expressions(board) {
  const out = [];
  const walk = (panels) => {
    for (const p of panels ?? []) {
      for (const t of p.targets ?? []) if (t.expr) out.push({ panel: p.title, expr: t.expr });
      walk(p.panels);
    }
  };
  walk(board.panels);
  return out;
}

test('every query of deploy/grafana/tessera.json returns data from a live cluster', async () => {
  const board = JSON.parse(fs.readFileSync(path.join(SOURCE_DIR, 'deploy/grafana/tessera.json'), 'utf8'));
  const exprs = expressions(board);
  assert.ok(exprs.length >= 15, `the board has ${exprs.length} queries`);
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'tessera-grafana-test-'));
  const spec = path.join(dir, 'cluster.yaml');
  fs.writeFileSync(spec, [
    `model: ${path.resolve(MODEL_DIR)}`,
    'chat_template: plain',
    'router: {port: 0}',
    'nodes:',
    '  - {name: prefill-0, role: prefill, backend: cpu, threads: 1}',
    '  - {name: decode-0, role: decode, backend: ref, args: ["--pd-min-tokens", "4"]}',
    '',
  ].join('\n'));
  const up = spawn(path.resolve(BIN), ['up', spec], { stdio: ['ignore', 'pipe', 'pipe'], cwd: dir });
  let err = '', out = '';
  up.stdout.on('data', (d) => { out += d; });
  up.stderr.on('data', (d) => { err += d; });
  let prom = null;
  try {
    const url = await until('the cluster', async () => out.match(/OpenAI API at (http:\/\/[\d.]+:\d+)\/v1/)?.[1], 60000);
    const nodes = [...err.matchAll(/tessera up: \S+ \((?:prefill|decode|both)[^)]*\) at (http:\/\/[\d.]+:\d+)/g)].map((m) => m[1]);
    assert.equal(nodes.length, 2, `two nodes announced: ${err}`);
    const targets = [url, ...nodes].map((u) => new URL(u).host);

    const port = await freePort();
    fs.writeFileSync(path.join(dir, 'prometheus.yml'), [
      'global: {scrape_interval: 1s, evaluation_interval: 1s}',
      'scrape_configs:',
      '  - job_name: tessera',
      `    static_configs: [{targets: [${targets.map((t) => `"${t}"`).join(', ')}]}]`,
      '',
    ].join('\n'));
    let promErr = '';
    prom = spawn(prometheus, [`--config.file=${path.join(dir, 'prometheus.yml')}`,
                              `--storage.tsdb.path=${path.join(dir, 'tsdb')}`,
                              `--web.listen-address=127.0.0.1:${port}`], { stdio: ['ignore', 'ignore', 'pipe'] });
    prom.stderr.on('data', (d) => { promErr += d; });
    const api = `http://127.0.0.1:${port}/api/v1`;
    const query = async (q) => {
      const r = await fetch(`${api}/query?query=${encodeURIComponent(q)}`);
      const j = await r.json();
      if (j.status !== 'success') throw new Error(`${q}: ${j.error ?? r.status}`);
      return j.data.result;
    };
    // Every target scraped successfully before any traffic, so rates see the counters move.
    await until(`prometheus scraping ${targets.join(', ')}: ${promErr.slice(-400)}`, async () => {
      const up = await query('up');
      return up.length === targets.length && up.every((s) => s.value[1] === '1');
    }, 60000);

    const client = new OpenAI({ apiKey: 'unused', baseURL: url + '/v1', maxRetries: 0, timeout: 120000 });
    const prompts = ['Once upon a time, Lily went to the park', 'Tom had a big red ball and a little dog',
                     'Once upon a time, Lily went to the park'];  // the repeat is a prefix-cache hit
    for (let round = 0; round < 2; ++round) {
      await Promise.all(prompts.map(async (content, i) => {
        if (i === 1) {
          const stream = await client.chat.completions.create({
            model: 'stories260K', messages: [{ role: 'user', content }], max_tokens: 24, temperature: 0, stream: true });
          for await (const _ of stream) { /* drain */ }
        } else {
          const r = await client.chat.completions.create({
            model: 'stories260K', messages: [{ role: 'user', content }], max_tokens: 16 + 8 * i, temperature: 0 });
          assert.ok(r.choices[0].message.content.length > 0);
        }
      }));
    }
    await sleep(4000);  // a few scrapes after the traffic

    // The names: what the nodes expose under vllm: is vLLM's, with model_name.
    const exposed = new Set();
    for (const n of nodes) {
      const text = await (await fetch(`${n}/metrics`)).text();
      for (const m of text.matchAll(/^(vllm:[a-z0-9_:]+?)(?:_bucket|_sum|_count)?\{([^}]*)\}/gm)) {
        exposed.add(m[1]);
        assert.match(m[2], /model_name="stories260K"/, `${m[1]} carries model_name`);
      }
    }
    for (const name of exposed) assert.ok(VLLM_NAMES.has(name), `${name} is one of vLLM's series`);
    for (const name of VLLM_NAMES) {
      if (['vllm:request_params_max_tokens', 'vllm:request_params_n', 'vllm:iteration_tokens_total',
           'vllm:time_per_output_token_seconds'].includes(name)) continue;  // vLLM's, not Tessera's (docs)
      assert.ok(exposed.has(name), `the nodes expose ${name}`);
    }

    // Grafana's variables as Grafana fills them: the model "All" (allValue .+), the rate interval.
    const failed = [];
    for (const { panel, expr } of exprs) {
      const q = expr.replaceAll('$model_name', '.+').replaceAll('$__rate_interval', '30s');
      const result = await query(q);
      const finite = result.filter((s) => Number.isFinite(Number(s.value[1])));
      if (finite.length === 0) failed.push(`${panel}: ${q} -> ${JSON.stringify(result)}`);
    }
    assert.deepEqual(failed, [], `queries without data:\n${failed.join('\n')}`);
  } finally {
    if (prom && prom.exitCode === null) { const gone = new Promise((r) => prom.on('exit', r)); prom.kill('SIGTERM'); await gone; }
    const code = await new Promise((resolve) => { up.removeAllListeners('exit'); up.on('exit', (c) => resolve(c)); up.kill('SIGTERM'); });
    assert.equal(code, 0, `tessera up exits cleanly: ${err}`);
    fs.rmSync(dir, { recursive: true, force: true });
  }
});
