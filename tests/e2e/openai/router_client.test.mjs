// tessera route in front of two tessera serve nodes, driven by the official OpenAI Node client (v4):
// results through the router equal `tessera generate`, streams arrive as events, API keys and malformed
// bodies fail the way the client expects (AuthenticationError, BadRequestError) without reaching a node.
//   TESSERA_BIN=build/release/bin/tessera TESSERA_MODEL_DIR=models/stories260K node router_client.test.mjs
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawn, execFileSync } from 'node:child_process';
import OpenAI from 'openai';

const BIN = process.env.TESSERA_BIN;
const MODEL_DIR = process.env.TESSERA_MODEL_DIR;
const MODEL = 'stories260K';
const KEY = 'sk-router-test';

function start(args) {
  return new Promise((resolve, reject) => {
    const proc = spawn(BIN, args, { stdio: ['ignore', 'pipe', 'pipe'] });
    let out = '', err = '';
    const timer = setTimeout(() => reject(new Error(`did not start: ${out} ${err}`)), 15000);
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

function reference(prompt, maxTokens) {
  const out = execFileSync(BIN, ['generate', '--model', MODEL_DIR, '--prompt', prompt, '--max-tokens', String(maxTokens),
                                 '--temperature', '0', '--no-echo', '--quiet']).toString();
  return out.endsWith('\n') ? out.slice(0, -1) : out;
}

async function requestsServed(node) {
  const text = await (await fetch(node.url + '/metrics')).text();
  return text.split('\n').filter((l) => l.startsWith('tessera_requests_total{'))
    .reduce((s, l) => s + Number(l.split(' ').pop()), 0);
}

let nodes = [], router, client;

before(async () => {
  assert.ok(BIN && MODEL_DIR, 'set TESSERA_BIN and TESSERA_MODEL_DIR');
  for (let i = 0; i < 2; i++) nodes.push(await start(['serve', '--model', MODEL_DIR, '--port', '0', '--chat-template', 'plain']));
  router = await start(['route', '--port', '0', '--nodes', nodes.map((n) => n.url).join(','), '--strategy', 'prefix_cache',
                        '--model', MODEL_DIR, '--api-key', KEY]);
  client = new OpenAI({ apiKey: KEY, baseURL: router.url + '/v1', maxRetries: 0, timeout: 60000 });
});

after(async () => {
  assert.equal(await stop(router), 0, 'SIGTERM ends the router cleanly');
  for (const n of nodes) await stop(n);
});

test('models through the router', async () => {
  const models = await client.models.list();
  assert.deepEqual(models.data.map((m) => m.id), [MODEL]);
});

test('completions and streamed chat through the router equal tessera generate', async () => {
  for (const prompt of ['Once upon a time', 'Lily went to the park']) {
    const r = await client.completions.create({ model: MODEL, prompt, max_tokens: 30, temperature: 0 });
    assert.equal(r.choices[0].text, reference(prompt, 30), prompt);
  }
  const content = 'The cat sat on';
  const stream = await client.chat.completions.create({ model: MODEL, messages: [{ role: 'user', content }],
                                                        max_tokens: 25, temperature: 0, stream: true,
                                                        stream_options: { include_usage: true } });
  let text = '', events = 0, usage = null;
  for await (const c of stream) {
    events++;
    if (c.usage) usage = c.usage;
    text += c.choices[0]?.delta?.content ?? '';
  }
  assert.equal(text, reference(content, 25));
  assert.ok(events > 5, 'tokens arrive as separate events through the router');
  assert.ok(usage && usage.completion_tokens > 0);
});

test('the request id reaches the client', async () => {
  const { data, response } = await client.completions
    .create({ model: MODEL, prompt: 'One day', max_tokens: 5 }, { headers: { 'x-request-id': 'rid-42' } })
    .withResponse();
  assert.equal(response.headers.get('x-request-id'), 'rid-42');
  assert.ok(data.choices[0].text.length > 0);
});

test('a wrong API key is an AuthenticationError', async () => {
  const bad = new OpenAI({ apiKey: 'sk-wrong', baseURL: router.url + '/v1', maxRetries: 0 });
  await assert.rejects(bad.completions.create({ model: MODEL, prompt: 'x', max_tokens: 2 }),
                       (e) => e instanceof OpenAI.AuthenticationError && e.status === 401);
});

test('malformed requests are BadRequestErrors and never reach a node', async () => {
  const before = (await Promise.all(nodes.map(requestsServed))).reduce((a, b) => a + b, 0);
  await assert.rejects(client.completions.create({ model: MODEL, prompt: 'x', max_tokens: -3 }),
                       (e) => e instanceof OpenAI.BadRequestError && e.param === 'max_tokens');
  await assert.rejects(client.completions.create({ model: MODEL, prompt: 'x', temperature: 9 }),
                       (e) => e instanceof OpenAI.BadRequestError && e.param === 'temperature');
  await assert.rejects(client.chat.completions.create({ model: MODEL, messages: [] }),
                       (e) => e instanceof OpenAI.BadRequestError && e.param === 'messages');
  const after = (await Promise.all(nodes.map(requestsServed))).reduce((a, b) => a + b, 0);
  assert.equal(after, before);
});
