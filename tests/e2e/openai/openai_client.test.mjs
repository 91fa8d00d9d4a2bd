// tessera serve against the official OpenAI Node client (v4) and raw HTTP: completions and chat, streaming
// and not, concurrency, prefix caching, bad input, disconnects and shutdown. Greedy outputs must equal
// `tessera generate` for the same prompts.
//   TESSERA_BIN=build/release/bin/tessera TESSERA_MODEL_DIR=models/stories260K node openai_client.test.mjs
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawn, execFileSync } from 'node:child_process';
import net from 'node:net';
import OpenAI from 'openai';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

const BIN = process.env.TESSERA_BIN;
const MODEL_DIR = process.env.TESSERA_MODEL_DIR;
const MODEL = 'stories260K';

// Starts `tessera serve --port 0 ...` and resolves once it prints its address.
function startServer(extraArgs = [], chatTemplate = 'plain') {
  return new Promise((resolve, reject) => {
    const proc = spawn(BIN, ['serve', '--model', MODEL_DIR, '--port', '0', '--chat-template', chatTemplate, ...extraArgs],
                       { stdio: ['ignore', 'pipe', 'pipe'] });
    let out = '', err = '';
    const timer = setTimeout(() => reject(new Error(`server did not start: ${out} ${err}`)), 15000);
    proc.stderr.on('data', (d) => { err += d; });
    proc.stdout.on('data', (d) => {
      out += d;
      const m = out.match(/listening on (http:\/\/[\d.]+:(\d+))/);
      if (m) { clearTimeout(timer); resolve({ proc, url: m[1], port: Number(m[2]), stderr: () => err }); }
    });
    proc.on('exit', (code) => { clearTimeout(timer); reject(new Error(`server exited ${code}: ${err}`)); });
  });
}

function stopServer(s, signal = 'SIGTERM') {
  return new Promise((resolve) => {
    if (s.proc.exitCode !== null) return resolve(s.proc.exitCode);
    s.proc.removeAllListeners('exit');
    s.proc.on('exit', (code, sig) => resolve(code ?? sig));
    s.proc.kill(signal);
  });
}

function reference(prompt, maxTokens) {
  const out = execFileSync(BIN, ['generate', '--model', MODEL_DIR, '--prompt', prompt, '--max-tokens', String(maxTokens),
                                 '--temperature', '0', '--no-echo', '--quiet']).toString();
  return out.endsWith('\n') ? out.slice(0, -1) : out;
}

async function post(url, path, body, headers = {}) {
  const r = await fetch(url + path, { method: 'POST', headers: { 'content-type': 'application/json', ...headers },
                                      body: typeof body === 'string' ? body : JSON.stringify(body) });
  const text = await r.text();
  let json = null;
  try { json = JSON.parse(text); } catch { /* not JSON */ }
  return { status: r.status, json, text };
}

async function metric(url, name) {
  const text = await (await fetch(url + '/metrics')).text();
  const line = text.split('\n').find((l) => l.startsWith(name + '{') || l.startsWith(name + ' '));
  return line === undefined ? undefined : Number(line.split(' ').pop());
}

let server, client;
const PROMPTS = ['Once upon a time', 'Lily went to the park', 'The cat sat on', 'Tom had a big red ball and',
                 'One day', 'She was very happy because', 'The sun was', 'A little dog named Max'];

before(async () => {
  assert.ok(BIN && MODEL_DIR, 'set TESSERA_BIN and TESSERA_MODEL_DIR');
  server = await startServer();
  client = new OpenAI({ apiKey: 'unused', baseURL: server.url + '/v1', maxRetries: 0, timeout: 60000 });
});

after(async () => {
  const code = await stopServer(server);
  assert.equal(code, 0, 'SIGTERM ends the server cleanly');
});

// A Hermes-style Jinja template (as Qwen's): tools are rendered into a system turn with tojson.
const HERMES = `{% if tools %}<|im_start|>system
<tools>
{% for t in tools %}{{ t | tojson }}
{% endfor %}</tools>
Answer with <tool_call>{"name": ..., "arguments": ...}</tool_call><|im_end|>
{% endif %}{% for m in messages %}<|im_start|>{{ m.role }}
{{ m.content }}<|im_end|>
{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant
{% endif %}`;

test('tools from the OpenAI client reach the Jinja chat template; forcing a call is refused', async () => {
  const dir = mkdtempSync(join(tmpdir(), 'tessera-tools-'));
  writeFileSync(join(dir, 'hermes.jinja'), HERMES);
  const s = await startServer([], join(dir, 'hermes.jinja'));
  try {
    const c = new OpenAI({ apiKey: 'unused', baseURL: s.url + '/v1', maxRetries: 0, timeout: 60000 });
    const tools = [{ type: 'function', function: { name: 'get_weather', description: 'Current weather in a city',
                     parameters: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] } } }];
    const messages = [{ role: 'user', content: 'What is the weather in Paris?' }];
    const plain = await c.chat.completions.create({ model: MODEL, messages, max_tokens: 20, temperature: 0 });
    const withTools = await c.chat.completions.create({ model: MODEL, messages, tools, max_tokens: 20, temperature: 0 });
    assert.ok(withTools.usage.prompt_tokens > plain.usage.prompt_tokens + 40,
              `${withTools.usage.prompt_tokens} vs ${plain.usage.prompt_tokens}: the tool schema is in the prompt`);
    // stories260K writes no tool call: the reply is content, and streaming (which holds back what could
    // open a call) gives the same text.
    assert.equal(withTools.choices[0].message.tool_calls, undefined);
    const stream = await c.chat.completions.create({ model: MODEL, messages, tools, max_tokens: 20, temperature: 0,
                                                     stream: true });
    let text = '';
    for await (const ch of stream) text += ch.choices[0]?.delta?.content ?? '';
    assert.equal(text, withTools.choices[0].message.content);
    // A forced call (tool_choice named: the grammar writes the template's own <tool_call> syntax) cut short by
    // max_tokens is no call: its text comes back as content.
    const cut = await c.chat.completions.create({ model: MODEL, messages, tools, max_tokens: 2,
                                                  tool_choice: { type: 'function', function: { name: 'get_weather' } } });
    assert.equal(cut.choices[0].finish_reason, 'length');
    assert.equal(cut.choices[0].message.tool_calls, undefined);
    assert.ok('<tool_call>'.startsWith(cut.choices[0].message.content), cut.choices[0].message.content);
  } finally {
    assert.equal(await stopServer(s), 0);
  }
});

test('models endpoint lists the served model', async () => {
  const models = await client.models.list();
  assert.deepEqual(models.data.map((m) => m.id), [MODEL]);
});

test('greedy completions equal tessera generate', async () => {
  for (const prompt of PROMPTS.slice(0, 4)) {
    const r = await client.completions.create({ model: MODEL, prompt, max_tokens: 40, temperature: 0 });
    assert.equal(r.choices[0].text, reference(prompt, 40), prompt);
    assert.equal(r.object, 'text_completion');
    assert.equal(r.usage.completion_tokens + r.usage.prompt_tokens, r.usage.total_tokens);
  }
});

test('streamed completion equals the whole one and reports usage', async () => {
  const prompt = 'Lily and Tom';
  const whole = await client.completions.create({ model: MODEL, prompt, max_tokens: 30, temperature: 0 });
  const stream = await client.completions.create({ model: MODEL, prompt, max_tokens: 30, temperature: 0, stream: true,
                                                   stream_options: { include_usage: true } });
  let text = '', chunks = 0, usage = null, finish = null;
  for await (const c of stream) {
    if (c.usage) usage = c.usage;
    if (c.choices.length) { text += c.choices[0].text; chunks++; finish = c.choices[0].finish_reason ?? finish; }
  }
  assert.equal(text, whole.choices[0].text);
  assert.ok(chunks > 5, 'tokens arrive as separate events');
  assert.equal(finish, whole.choices[0].finish_reason);
  assert.deepEqual(usage.completion_tokens, whole.usage.completion_tokens);
});

test('chat completions, whole and streamed, equal generate on the plain-formatted prompt', async () => {
  const content = 'Once upon a time, Lily';
  const want = reference(content, 25);
  const r = await client.chat.completions.create({ model: MODEL, messages: [{ role: 'user', content }], max_tokens: 25, temperature: 0 });
  assert.equal(r.choices[0].message.role, 'assistant');
  assert.equal(r.choices[0].message.content, want);
  const stream = await client.chat.completions.create({ model: MODEL, messages: [{ role: 'user', content }], max_tokens: 25,
                                                        temperature: 0, stream: true });
  let text = '', role = null;
  for await (const c of stream) {
    role = c.choices[0]?.delta?.role ?? role;
    text += c.choices[0]?.delta?.content ?? '';
  }
  assert.equal(role, 'assistant');
  assert.equal(text, want);
});

test('32 concurrent requests, streamed and not, each equal to its own greedy reference', async () => {
  const jobs = [];
  for (let i = 0; i < 32; i++) {
    const prompt = `${PROMPTS[i % PROMPTS.length]} ${['and', 'but', 'so', 'then'][i % 4]}`;
    const n = 20 + (i % 5) * 5;
    jobs.push({ prompt, n, stream: i % 2 === 0 });
  }
  const results = await Promise.all(jobs.map(async (j) => {
    if (!j.stream) return (await client.completions.create({ model: MODEL, prompt: j.prompt, max_tokens: j.n, temperature: 0 })).choices[0].text;
    let t = '';
    for await (const c of await client.completions.create({ model: MODEL, prompt: j.prompt, max_tokens: j.n, temperature: 0, stream: true })) {
      t += c.choices[0]?.text ?? '';
    }
    return t;
  }));
  jobs.forEach((j, i) => assert.equal(results[i], reference(j.prompt, j.n), j.prompt));
});

test('seeded sampling is reproducible; logprobs come back', async () => {
  const args = { model: MODEL, prompt: 'The dog', max_tokens: 20, temperature: 0.9, top_p: 0.95, seed: 1234 };
  const a = await client.completions.create(args);
  const b = await client.completions.create(args);
  assert.equal(a.choices[0].text, b.choices[0].text);
  const lp = await client.chat.completions.create({ model: MODEL, messages: [{ role: 'user', content: 'The dog' }], max_tokens: 5,
                                                    temperature: 0, logprobs: true, top_logprobs: 2 });
  const content = lp.choices[0].logprobs.content;
  assert.equal(content.length, 5);
  for (const t of content) {
    assert.ok(t.logprob <= 0);
    assert.equal(t.top_logprobs.length, 2);
    assert.equal(t.top_logprobs[0].token, t.token, 'greedy picks the most likely token');
  }
});

test('a shared long prefix hits the prefix cache and cuts time to first token', async () => {
  let prefix = '';
  while (prefix.length < 1000) prefix += 'Lily saw a big red ball in the park and she wanted to play with it. ';
  const hitsBefore = await metric(server.url, 'tessera_prefix_cache_hit_tokens_total');
  async function ttft(prompt) {
    const t0 = performance.now();
    const stream = await client.completions.create({ model: MODEL, prompt, max_tokens: 2, temperature: 0, stream: true });
    let first = null;
    for await (const c of stream) { if (first === null && c.choices[0]?.text) first = performance.now() - t0; }
    return first;
  }
  const cold = await ttft(prefix + 'Then Tom');
  const warm = await ttft(prefix + 'Then Sue');
  const hitsAfter = await metric(server.url, 'tessera_prefix_cache_hit_tokens_total');
  assert.ok(hitsAfter - hitsBefore >= 200, `prefix cache hit tokens grew by ${hitsAfter - hitsBefore}`);
  assert.ok(warm < cold, `warm TTFT ${warm.toFixed(1)} ms should be below cold ${cold.toFixed(1)} ms`);
  const r = await client.completions.create({ model: MODEL, prompt: prefix + 'Then Ann', max_tokens: 2, temperature: 0 });
  assert.ok(r.usage.prompt_tokens_details.cached_tokens >= 200);
});

test('bad input gets OpenAI-shaped 4xx errors, never a 500', async () => {
  const cases = [
    ['{"model": "stories260K", "prompt": ', 400],
    [{ model: MODEL, prompt: 'hi', max_tokens: 'ten' }, 400],
    [{ model: MODEL, prompt: 'hi', max_tokens: -5 }, 400],
    [{ model: MODEL, prompt: 'hi', max_tokens: 1e9 }, 400],
    [{ model: MODEL, prompt: 'hi', temperature: 'hot' }, 400],
    [{ model: MODEL, prompt: 42 }, 400],
    [{ model: MODEL, prompt: 'hi', n: 17 }, 400],
    [{ model: MODEL, prompt: 'hi', logit_bias: { 999999: 1 } }, 400],
    [{ model: MODEL, prompt: 'word '.repeat(2000), max_tokens: 5 }, 400],
    [{ model: 'gpt-9', prompt: 'hi' }, 404],
    [{ prompt: 'hi' }, 400],
    ['x'.repeat(1 << 20), 400],
  ];
  for (const [body, status] of cases) {
    const r = await post(server.url, '/v1/completions', body);
    assert.equal(r.status, status, `${String(JSON.stringify(body)).slice(0, 60)} -> ${r.text.slice(0, 200)}`);
    assert.equal(typeof r.json?.error?.message, 'string', r.text.slice(0, 200));
  }
  const chat = await post(server.url, '/v1/chat/completions', { model: MODEL, messages: 'hello' });
  assert.equal(chat.status, 400);
  await assert.rejects(client.completions.create({ model: 'nope', prompt: 'x' }), (e) => e.status === 404);
  const ctx = await post(server.url, '/v1/completions', { model: MODEL, prompt: 'hi', max_tokens: 600 });
  assert.match(ctx.json.error.message, /maximum context length is 512/);
});

test('a client sending its request byte by byte does not hold up others', async () => {
  const body = JSON.stringify({ model: MODEL, prompt: 'Slow', max_tokens: 3, temperature: 0 });
  const req = `POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: ${body.length}\r\n\r\n${body}`;
  const sock = net.connect(server.port, '127.0.0.1');
  let reply = '';
  sock.on('data', (d) => { reply += d; });
  const slow = (async () => {
    for (const ch of req) { sock.write(ch); await new Promise((r) => setTimeout(r, 8)); }
  })();
  const t0 = performance.now();
  for (let i = 0; i < 5; i++) await client.completions.create({ model: MODEL, prompt: 'Fast', max_tokens: 3, temperature: 0 });
  const fastMs = performance.now() - t0;
  await slow;
  for (let i = 0; i < 200 && !reply.includes('"choices"'); i++) await new Promise((r) => setTimeout(r, 10));
  sock.destroy();
  assert.ok(fastMs < 1000, `5 requests took ${fastMs} ms while a slow client was connected`);
  assert.match(reply, /^HTTP\/1.1 200/);
});

test('clients disconnecting mid-stream cancel their requests and free every block', async () => {
  // Eight long streams at once keep the engine busy for a while; each client hangs up after its first event.
  const body = JSON.stringify({ model: MODEL, prompt: 'Once upon a time', max_tokens: 450, temperature: 0, stream: true,
                                ignore_eos: true });
  const req = `POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: ${body.length}\r\n\r\n${body}`;
  await Promise.all(Array.from({ length: 8 }, () => new Promise((resolve) => {
    const sock = net.connect(server.port, '127.0.0.1', () => sock.write(req));
    sock.on('data', (d) => { if (String(d).includes('data: {')) { sock.destroy(); resolve(); } });
    sock.on('error', resolve);
  })));
  // The engine frees a cancelled request's blocks before the handler counts it, so wait for all three.
  const count499 = (text) => text.split('\n')
    .filter((l) => l.startsWith('tessera_requests_total{') && l.includes('status="499"'))
    .reduce((sum, l) => sum + Number(l.split(' ').pop()), 0);
  let used = -1, running = -1, cancelled = 0;
  for (let i = 0; i < 200; i++) {
    used = await metric(server.url, 'tessera_kv_blocks_used');
    running = await metric(server.url, 'tessera_requests_running');
    cancelled = count499(await (await fetch(server.url + '/metrics')).text());
    if (used === 0 && running === 0 && cancelled >= 1) break;
    await new Promise((r) => setTimeout(r, 20));
  }
  assert.equal(used, 0, 'every KV block is back in the pool');
  assert.equal(running, 0);
  assert.ok(cancelled >= 1, `requests cancelled by disconnect: ${cancelled}`);
});

test('a full queue answers 429, and SIGTERM lets in-flight requests finish', async () => {
  const small = await startServer(['--max-num-seqs', '1', '--max-queue', '1', '--max-batch-tokens', '16']);
  try {
    const c = new OpenAI({ apiKey: 'unused', baseURL: small.url + '/v1', maxRetries: 0 });
    const results = await Promise.allSettled(Array.from({ length: 6 }, () =>
      c.completions.create({ model: MODEL, prompt: 'Once upon a time', max_tokens: 200, temperature: 0, ignore_eos: true })));
    const statuses = results.map((r) => (r.status === 'fulfilled' ? 200 : r.reason.status));
    assert.ok(statuses.includes(429), `statuses ${statuses}`);
    assert.ok(statuses.includes(200), `statuses ${statuses}`);
    // Shutdown while a request streams: it completes, then the process exits 0.
    const stream = await c.completions.create({ model: MODEL, prompt: 'Lily', max_tokens: 100, temperature: 0, stream: true,
                                                ignore_eos: true });
    const code = stopServer(small);
    let finish = null;
    for await (const ch of stream) finish = ch.choices[0]?.finish_reason ?? finish;
    assert.equal(finish, 'length');
    assert.equal(await code, 0);
  } finally {
    await stopServer(small, 'SIGKILL');
  }
});
