// Structured outputs end to end with the official OpenAI Node client (v4) against tessera serve on a random-weight
// model (tessera synth stories15M, 2 layers, 2048 positions, vocab 32000) sampled at temperature 1: 40 seeded JSON schemas through
// response_format json_schema (strict), validated by ajv; chat.completions.parse with a zod schema; vLLM's
// guided_* and structured_outputs and llama-server's json_schema and grammar fields; streaming; bad schemas are
// BadRequestErrors naming the position; a grammar cut by max_tokens ends "length". Then the same through
// `tessera route`, and through a decode node whose prompts are prefilled on a prefill node (the grammar goes along).
//   TESSERA_BIN=build/release/bin/tessera node structured_outputs.test.mjs
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawn, execFileSync } from 'node:child_process';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import OpenAI from 'openai';
import { zodResponseFormat } from 'openai/helpers/zod';
import { z } from 'zod';
import Ajv2020 from 'ajv/dist/2020.js';
import addFormats from 'ajv-formats';

const BIN = process.env.TESSERA_BIN;
const ajv = new Ajv2020({ strict: false, allErrors: true });
addFormats(ajv, { mode: 'full' });

function start(args) {
  return new Promise((resolve, reject) => {
    const proc = spawn(BIN, args, { stdio: ['ignore', 'pipe', 'pipe'] });
    let out = '', err = '';
    const timer = setTimeout(() => reject(new Error(`did not start: ${out} ${err}`)), 20000);
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
    if (!s || s.proc.exitCode !== null) return resolve(s ? s.proc.exitCode : 0);
    s.proc.removeAllListeners('exit');
    s.proc.on('exit', (code, sig) => resolve(code ?? sig));
    s.proc.kill('SIGTERM');
  });
}

// A seeded generator (mulberry32) of schemas a random model can finish: bounded strings, enums, bounded numbers,
// nested objects, short arrays, anyOf, $ref/$defs, formats.
function rng(seed) {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6D2B79F5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}
function schemaFor(seed) {
  const r = rng(seed);
  const pick = (xs) => xs[Math.floor(r() * xs.length)];
  const scalar = () => pick([
    () => ({ type: 'string', maxLength: 1 + Math.floor(r() * 12) }),
    () => ({ type: 'string', format: pick(['date', 'date-time', 'uuid', 'email', 'ipv4', 'time']) }),
    () => ({ type: 'string', pattern: pick(['^[A-Z]{2}-\\d{3}$', '^(red|green|blue)$', '^[a-z]{1,6}@x\\.org$']) }),
    () => ({ type: 'integer', minimum: -50, maximum: 5000 }),
    () => ({ type: 'number', minimum: 0, maximum: 10 }),
    () => ({ type: 'boolean' }),
    () => ({ enum: ['alpha', 'beta', 3, null, true] }),
    () => ({ $ref: '#/$defs/point' }),
  ])();
  const value = (depth) => {
    const k = r();
    if (depth <= 0 || k < 0.55) return scalar();
    if (k < 0.75) return object(depth - 1);
    if (k < 0.9) return { type: 'array', items: value(depth - 1), minItems: 1, maxItems: 3 };
    return { anyOf: [{ type: 'integer', minimum: 0, maximum: 9 }, { type: 'string', maxLength: 4 }, { type: 'null' }] };
  };
  const object = (depth) => {
    const n = 1 + Math.floor(r() * 4);
    const properties = {};
    const required = [];
    for (let i = 0; i < n; i++) {
      const name = pick(['id', 'name', 'kind', 'when', 'count', 'tags', 'ok', 'note']) + i;
      properties[name] = value(depth);
      if (r() < 0.7) required.push(name);
    }
    return { type: 'object', properties, required, additionalProperties: false };
  };
  const root = object(2);
  root.$defs = { point: { type: 'object', properties: { x: { type: 'integer', minimum: 0, maximum: 99 },
                                                        y: { type: 'integer', minimum: 0, maximum: 99 } },
                          required: ['x', 'y'], additionalProperties: false } };
  return root;
}

async function inBatches(items, size, fn) {
  const out = [];
  for (let i = 0; i < items.length; i += size) out.push(...await Promise.all(items.slice(i, i + size).map(fn)));
  return out;
}

let dir, model, tokenizer, node, client, MODEL;

before(async () => {
  assert.ok(BIN, 'set TESSERA_BIN');
  dir = mkdtempSync(join(tmpdir(), 'tessera-structured-'));
  model = join(dir, 'model.bin');
  tokenizer = join(dir, 'tok.bin');
  execFileSync(BIN, ['synth', '--shape', 'stories15M', '--layers', '2', '--seed', '7', '--max-seq-len', '2048', '--out', model,
                     '--tokenizer-out', tokenizer]);
  // A Hermes-style template: tools need a Jinja template to reach the prompt.
  const template = join(dir, 'chat.jinja');
  writeFileSync(template, `{% if tools %}<|im_start|>system
{% for t in tools %}{{ t | tojson }}
{% endfor %}<|im_end|>
{% endif %}{% for m in messages %}<|im_start|>{{ m.role }}
{{ m.content }}<|im_end|>
{% endfor %}<|im_start|>assistant
`);
  node = await start(['serve', '--model', model, '--tokenizer', tokenizer, '--port', '0', '--chat-template', template]);
  client = new OpenAI({ apiKey: 'unused', baseURL: node.url + '/v1', maxRetries: 0, timeout: 120000 });
  MODEL = (await client.models.list()).data[0].id;
});

after(async () => {
  assert.equal(await stop(node), 0, 'SIGTERM ends the server cleanly');
});

test('40 seeded json_schema requests at temperature 1: every finished output validates with ajv', async () => {
  const seeds = Array.from({ length: 40 }, (_, i) => i + 1);
  const results = await inBatches(seeds, 8, async (seed) => {
    const schema = schemaFor(seed);
    const r = await client.chat.completions.create({
      model: MODEL, messages: [{ role: 'user', content: 'Describe a thing.' }], temperature: 1, seed, max_tokens: 400,
      response_format: { type: 'json_schema', json_schema: { name: `s${seed}`, schema, strict: true } },
    });
    return { seed, schema, choice: r.choices[0] };
  });
  let finished = 0;
  for (const { seed, schema, choice } of results) {
    if (choice.finish_reason !== 'stop') {
      assert.equal(choice.finish_reason, 'length', `seed ${seed}`);
      continue;
    }
    finished++;
    const value = JSON.parse(choice.message.content);
    const validate = ajv.compile(schema);
    assert.ok(validate(value), `seed ${seed}: ${ajv.errorsText(validate.errors)}\n${choice.message.content}`);
  }
  assert.ok(finished >= 36, `only ${finished} of 40 finished within max_tokens`);
});

test('chat.completions.parse with a zod schema', async () => {
  const Pet = z.object({ name: z.string().max(10), age: z.number().int().min(0).max(30),
                         kind: z.enum(['cat', 'dog', 'parrot']), vaccinated: z.boolean(),
                         toys: z.array(z.string().max(6)).max(3) });
  for (const seed of [1, 2, 3]) {
    const r = await client.beta.chat.completions.parse({
      model: MODEL, messages: [{ role: 'user', content: 'A pet, please.' }], temperature: 1, seed, max_tokens: 300,
      response_format: zodResponseFormat(Pet, 'pet'),
    });
    const parsed = r.choices[0].message.parsed;
    assert.ok(parsed, 'the client parsed the reply');
    assert.deepEqual(Pet.parse(parsed), parsed);
  }
});

test('vLLM and llama-server request forms', async () => {
  const re = '[A-Z][a-z]{2,7} [0-9]{2}';
  const a = await client.completions.create({ model: MODEL, prompt: 'Name: ', max_tokens: 30, temperature: 1, seed: 3,
                                              guided_regex: re });
  assert.equal(a.choices[0].finish_reason, 'stop');
  assert.match(a.choices[0].text, new RegExp(`^(?:${re})$`));
  const b = await client.completions.create({ model: MODEL, prompt: 'Pick: ', max_tokens: 30, temperature: 1, seed: 4,
                                              guided_choice: ['left', 'right', 'straight on'] });
  assert.ok(['left', 'right', 'straight on'].includes(b.choices[0].text), b.choices[0].text);
  const schema = { type: 'object', properties: { n: { type: 'integer', minimum: 1, maximum: 9 } }, required: ['n'],
                   additionalProperties: false };
  for (const extra of [{ guided_json: schema }, { structured_outputs: { json: schema } }, { json_schema: schema }]) {
    const c = await client.chat.completions.create({ model: MODEL, messages: [{ role: 'user', content: 'n?' }],
                                                     max_tokens: 60, temperature: 1, seed: 5, ...extra });
    assert.equal(c.choices[0].finish_reason, 'stop', JSON.stringify(extra));
    const v = JSON.parse(c.choices[0].message.content);
    assert.ok(Number.isInteger(v.n) && v.n >= 1 && v.n <= 9, c.choices[0].message.content);
  }
  const g = await client.completions.create({ model: MODEL, prompt: 'List: ', max_tokens: 60, temperature: 1, seed: 6,
                                              grammar: 'root ::= item ("," item){1,3}\nitem ::= [a-z]{1,5}\n' });
  assert.match(g.choices[0].text, /^[a-z]{1,5}(,[a-z]{1,5}){1,3}$/);
  const o = await client.chat.completions.create({ model: MODEL, messages: [{ role: 'user', content: 'JSON!' }],
                                                   max_tokens: 200, temperature: 1, seed: 8,
                                                   response_format: { type: 'json_object' } });
  if (o.choices[0].finish_reason === 'stop') {
    const v = JSON.parse(o.choices[0].message.content);
    assert.ok(v !== null && typeof v === 'object' && !Array.isArray(v));
  }
});

test('a streamed json_schema reply assembles into a valid document', async () => {
  const schema = schemaFor(99);
  const stream = await client.chat.completions.create({
    model: MODEL, messages: [{ role: 'user', content: 'Go.' }], temperature: 1, seed: 9, max_tokens: 400, stream: true,
    response_format: { type: 'json_schema', json_schema: { name: 'streamed', schema, strict: true } },
  });
  let text = '', finish = null, events = 0;
  for await (const chunk of stream) {
    events++;
    text += chunk.choices[0]?.delta?.content ?? '';
    finish = chunk.choices[0]?.finish_reason ?? finish;
  }
  assert.equal(finish, 'stop');
  assert.ok(events > 3);
  const validate = ajv.compile(schema);
  assert.ok(validate(JSON.parse(text)), ajv.errorsText(validate.errors));
});

test('bad schemas, regexes and grammars are BadRequestErrors naming the position', async () => {
  const cases = [
    [{ response_format: { type: 'json_schema', json_schema: { name: 'x', schema: { type: 'object',
        properties: { a: { type: 'strng' } } } } } }, /#\/properties\/a\/type/],
    [{ guided_regex: '[a-z' }, /regex column 1/],
    [{ guided_grammar: 'root ::= "a" ( "b"\n' }, /line 2 column 1|expecting '\)'/],
    [{ grammar: 'root ::= missing\n' }, /undefined rule 'missing' \(line 1 column 10\)/],
    [{ response_format: { type: 'json_object' }, guided_regex: 'a' }, /both ask for structured output/],
  ];
  for (const [extra, message] of cases) {
    await assert.rejects(
      client.chat.completions.create({ model: MODEL, messages: [{ role: 'user', content: 'x' }], max_tokens: 5, ...extra }),
      (e) => e instanceof OpenAI.BadRequestError && e.status === 400 && message.test(e.message),
      JSON.stringify(extra));
  }
});

test('a grammar cut by max_tokens ends with finish_reason length, not a claimed complete document', async () => {
  const schema = { type: 'object', properties: { text: { type: 'string', minLength: 40, maxLength: 60 } },
                   required: ['text'], additionalProperties: false };
  const r = await client.chat.completions.create({ model: MODEL, messages: [{ role: 'user', content: 'x' }],
                                                   max_tokens: 4, temperature: 1, seed: 1, response_format: {
                                                     type: 'json_schema', json_schema: { name: 'cut', schema } } });
  assert.equal(r.choices[0].finish_reason, 'length');
  assert.throws(() => JSON.parse(r.choices[0].message.content));
});

test('tool_choice required and named: calls whose arguments validate against the tool schemas, streamed too', async () => {
  const tools = [
    { type: 'function', function: { name: 'get_weather', description: 'Weather in a city', parameters: {
      type: 'object', properties: { city: { type: 'string', maxLength: 12 }, unit: { enum: ['c', 'f'] },
                                    days: { type: 'integer', minimum: 1, maximum: 7 } },
      required: ['city', 'unit'], additionalProperties: false } } },
    { type: 'function', function: { name: 'add', parameters: {
      type: 'object', properties: { a: { type: 'integer', minimum: -99, maximum: 99 }, b: { type: 'number', minimum: 0,
                                                                                           maximum: 1 } },
      required: ['a', 'b'], additionalProperties: false } } },
  ];
  const validators = Object.fromEntries(tools.map((t) => [t.function.name, ajv.compile(t.function.parameters)]));
  const check = (call) => {
    assert.ok(call.function.name in validators, call.function.name);
    const args = JSON.parse(call.function.arguments);
    assert.ok(validators[call.function.name](args), `${call.function.arguments}: ${ajv.errorsText(validators[call.function.name].errors)}`);
  };
  const messages = [{ role: 'user', content: 'What is the weather in Paris?' }];
  for (const seed of [1, 2, 3]) {
    const named = await client.chat.completions.create({ model: MODEL, messages, tools, temperature: 1, seed, max_tokens: 200,
                                                         tool_choice: { type: 'function', function: { name: 'get_weather' } } });
    const choice = named.choices[0];
    assert.equal(choice.finish_reason, 'tool_calls');
    assert.equal(choice.message.content, null);
    assert.equal(choice.message.tool_calls.length, 1);
    assert.equal(choice.message.tool_calls[0].function.name, 'get_weather');
    check(choice.message.tool_calls[0]);
    const required = await client.chat.completions.create({ model: MODEL, messages, tools, temperature: 1, seed,
                                                            max_tokens: 300, tool_choice: 'required',
                                                            parallel_tool_calls: false });
    assert.equal(required.choices[0].finish_reason, 'tool_calls');
    assert.equal(required.choices[0].message.tool_calls.length, 1);
    check(required.choices[0].message.tool_calls[0]);
    // Streamed: the calls arrive as tool_calls deltas, no content.
    const stream = await client.chat.completions.create({ model: MODEL, messages, tools, temperature: 1, seed: seed + 10,
                                                          max_tokens: 400, tool_choice: 'required', stream: true });
    const calls = [];
    let content = '', finish = null;
    for await (const chunk of stream) {
      const d = chunk.choices[0]?.delta ?? {};
      content += d.content ?? '';
      for (const tc of d.tool_calls ?? []) {
        calls[tc.index] ??= { function: { name: '', arguments: '' } };
        calls[tc.index].function.name += tc.function?.name ?? '';
        calls[tc.index].function.arguments += tc.function?.arguments ?? '';
      }
      finish = chunk.choices[0]?.finish_reason ?? finish;
    }
    assert.equal(finish, 'tool_calls');
    assert.equal(content, '');
    assert.ok(calls.length >= 1);
    calls.forEach(check);
  }
  await assert.rejects(
    client.chat.completions.create({ model: MODEL, messages, tools, tool_choice: { type: 'function', function: { name: 'nope' } } }),
    (e) => e instanceof OpenAI.BadRequestError && /not among 'tools'/.test(e.message));
});

test('through tessera route, and through a decode node prefilling on a prefill node', async () => {
  const router = await start(['route', '--port', '0', '--nodes', node.url, '--tokenizer', tokenizer]);
  const prefill = await start(['serve', '--model', model, '--tokenizer', tokenizer, '--port', '0', '--role', 'prefill']);
  const decode = await start(['serve', '--model', model, '--tokenizer', tokenizer, '--port', '0', '--role', 'decode',
                              '--prefill-nodes', prefill.url, '--pd-min-tokens', '1', '--chat-template', 'plain']);
  try {
    for (const [name, url] of [['router', router.url], ['pd', decode.url]]) {
      const c = new OpenAI({ apiKey: 'unused', baseURL: url + '/v1', maxRetries: 0, timeout: 120000 });
      for (const seed of [11, 12, 13, 14]) {
        const schema = schemaFor(seed);
        const r = await c.chat.completions.create({
          model: MODEL, messages: [{ role: 'user', content: 'Describe a thing in detail, please.' }], temperature: 1,
          seed, max_tokens: 400, response_format: { type: 'json_schema', json_schema: { name: 'x', schema } } });
        assert.equal(r.choices[0].finish_reason, 'stop', `${name} seed ${seed}`);
        const validate = ajv.compile(schema);
        assert.ok(validate(JSON.parse(r.choices[0].message.content)), `${name}: ${ajv.errorsText(validate.errors)}`);
      }
      await assert.rejects(
        c.completions.create({ model: MODEL, prompt: 'x', max_tokens: 5, guided_regex: '(a' }),
        (e) => e instanceof OpenAI.BadRequestError && /regex column 1/.test(e.message), name);
    }
    const metrics = await (await fetch(decode.url + '/metrics')).text();
    const remote = metrics.split('\n').find((l) => l.startsWith('tessera_pd_requests_total{path="remote"}'));
    assert.ok(remote && Number(remote.split(' ').pop()) >= 4, `prompts were prefilled remotely: ${remote}`);
  } finally {
    await stop(decode);
    await stop(prefill);
    await stop(router);
  }
});
