// /v1/embeddings with the official OpenAI Node client (v4), through `tessera route` in front of a pooling node
// (a synthetic Qwen3-Embedding-shaped GGUF, --matryoshka) and a generate node serving the same file: the client's
// embeddings.create (which asks for base64 and decodes it to floats unless told otherwise) gets the vectors the node
// gives as floats, for a string, a list of strings, token ids and token-id lists; `dimensions` shortens and
// renormalises; a bad request is a BadRequestError, an unknown model a NotFoundError; completions still reach the
// generate node through the same router.
//   TESSERA_BIN=build/release/bin/tessera node embeddings_client.test.mjs
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawn, execFileSync } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import OpenAI from 'openai';

const BIN = process.env.TESSERA_BIN;
const MODEL = 'q3e';

function start(args) {
  return new Promise((resolve, reject) => {
    const proc = spawn(BIN, args, { stdio: ['ignore', 'pipe', 'pipe'] });
    let out = '', err = '';
    const timer = setTimeout(() => reject(new Error(`did not start: ${out} ${err}`)), 30000);
    proc.stderr.on('data', (d) => { err += d; });
    proc.stdout.on('data', (d) => {
      out += d;
      const m = out.match(/listening on (http:\/\/[\d.]+:(\d+))/);
      if (m) { clearTimeout(timer); resolve({ proc, url: m[1] }); }
    });
    proc.on('exit', (code) => { clearTimeout(timer); reject(new Error(`exited ${code}: ${err}`)); });
  });
}

function stop(s) {
  return new Promise((resolve) => {
    if (s.proc.exitCode !== null) return resolve(s.proc.exitCode);
    s.proc.removeAllListeners('exit');
    s.proc.on('exit', (code, sig) => resolve(code ?? sig));
    s.proc.kill('SIGTERM');
  });
}

async function floats(node, input, extra = {}) {
  const r = await fetch(node.url + '/v1/embeddings', {
    method: 'POST', headers: { 'Content-Type': 'application/json' },
    body: JSON.stringify({ model: MODEL, input, encoding_format: 'float', ...extra }),
  });
  assert.equal(r.status, 200);
  return (await r.json()).data.map((d) => d.embedding);
}

const norm = (v) => Math.sqrt(v.reduce((s, x) => s + x * x, 0));

let dir, pooling, generate, router, client;

before(async () => {
  assert.ok(BIN, 'set TESSERA_BIN');
  dir = mkdtempSync(join(tmpdir(), 'tessera-embeddings-client-'));
  const model = join(dir, 'q3e.gguf');
  execFileSync(BIN, ['synth', '--shape', 'qwen3-embedding-0.6b', '--small', '--format', 'gguf', '--seed', '2',
                     '--out', model], { stdio: 'ignore' });
  pooling = await start(['serve', '--model', model, '--port', '0', '--matryoshka', '--served-model-name', MODEL]);
  generate = await start(['serve', '--model', model, '--port', '0', '--runner', 'generate',
                          '--served-model-name', MODEL]);
  router = await start(['route', '--port', '0', '--nodes', `${pooling.url},${generate.url}`, '--strategy',
                        'round_robin']);
  // Until its first /health probes the router does not know which node pools: wait for both runners.
  for (let i = 0; i < 100; i++) {
    const nodes = (await (await fetch(router.url + '/admin/nodes')).json()).nodes;
    if (nodes.every((n) => n.runner)) break;
    await new Promise((r) => setTimeout(r, 100));
  }
  client = new OpenAI({ apiKey: 'unused', baseURL: router.url + '/v1', maxRetries: 0, timeout: 60000 });
});

after(async () => {
  assert.equal(await stop(router), 0, 'SIGTERM ends the router cleanly');
  for (const n of [pooling, generate]) await stop(n);
  rmSync(dir, { recursive: true, force: true });
});

test('embeddings.create decodes base64 to the node\'s float vectors', async () => {
  const text = 'The quick brown fox jumps over the lazy dog.';
  const r = await client.embeddings.create({ model: MODEL, input: text });
  assert.equal(r.object, 'list');
  assert.equal(r.model, MODEL);
  assert.equal(r.data.length, 1);
  assert.equal(r.data[0].object, 'embedding');
  assert.equal(r.data[0].index, 0);
  assert.ok(r.usage.prompt_tokens > 5 && r.usage.total_tokens === r.usage.prompt_tokens, JSON.stringify(r.usage));
  const [want] = await floats(pooling, text);
  assert.equal(r.data[0].embedding.length, want.length);
  // The client decodes little-endian float32: exactly the node's values rounded to float32.
  for (let i = 0; i < want.length; i++) assert.equal(r.data[0].embedding[i], Math.fround(want[i]), `element ${i}`);
  assert.ok(Math.abs(norm(r.data[0].embedding) - 1) < 1e-5);
});

test('lists of strings, token ids and token-id lists, in order', async () => {
  const texts = ['first input', 'second, longer input text', 'third'];
  const r = await client.embeddings.create({ model: MODEL, input: texts, encoding_format: 'float' });
  assert.deepEqual(r.data.map((d) => d.index), [0, 1, 2]);
  const want = await floats(pooling, texts);
  for (let i = 0; i < 3; i++) assert.deepEqual(r.data[i].embedding, want[i]);
  assert.notDeepEqual(r.data[0].embedding, r.data[1].embedding);
  const ids = await client.embeddings.create({ model: MODEL, input: [300, 301, 302, 2] });
  assert.equal(ids.data.length, 1);
  assert.equal(ids.usage.prompt_tokens, 4);
  const lists = await client.embeddings.create({ model: MODEL, input: [[300, 301, 302, 2], [400, 2]] });
  assert.equal(lists.data.length, 2);
  assert.equal(lists.usage.prompt_tokens, 6);
  assert.deepEqual(lists.data[0].embedding, ids.data[0].embedding);
});

test('dimensions shortens and renormalises', async () => {
  const r = await client.embeddings.create({ model: MODEL, input: 'hello', dimensions: 16 });
  assert.equal(r.data[0].embedding.length, 16);
  assert.ok(Math.abs(norm(r.data[0].embedding) - 1) < 1e-5);
  const [full] = await floats(pooling, 'hello');
  const head = norm(full.slice(0, 16));
  for (let i = 0; i < 16; i++) assert.ok(Math.abs(r.data[0].embedding[i] - full[i] / head) < 1e-6);
});

test('errors arrive as the client\'s error classes', async () => {
  await assert.rejects(client.embeddings.create({ model: MODEL, input: '' }),
                       (e) => e instanceof OpenAI.BadRequestError && e.param === 'input');
  await assert.rejects(client.embeddings.create({ model: MODEL, input: 'x', dimensions: 4096 }),
                       (e) => e instanceof OpenAI.BadRequestError && e.param === 'dimensions');
  await assert.rejects(client.embeddings.create({ model: 'no-such-model', input: 'x' }),
                       (e) => e instanceof OpenAI.NotFoundError);
});

test('completions reach the generate node through the same router', async () => {
  for (let i = 0; i < 3; i++) {
    const r = await client.completions.create({ model: MODEL, prompt: 'hello', max_tokens: 3 });
    assert.equal(r.choices.length, 1);
    const e = await client.embeddings.create({ model: MODEL, input: 'hello' });
    assert.equal(e.data.length, 1);
  }
});
