// Tool calls as agents use them, with the official OpenAI Node client (v4) against tessera serve, for each
// family's real chat template (llama.cpp's models/templates) and tool-call parser:
//  - `runTools` with `stream: true` and a named tool_choice: the grammar forces the call, the node streams it as
//    OpenAI does (name first, arguments in pieces), the client's streaming runner assembles the call, parses the
//    arguments (which validate against the tool's schema, ajv) and runs our function; its
//    `tool_calls.function.arguments.delta` events show the arguments arriving in pieces;
//  - the conversation the runner built (the assistant's tool_calls with the ids the node gave, the tool result)
//    goes back in and renders through the family's template;
//  - a call written in the family's own syntax (fed to the node as tokens it generated, tessera_resume) comes
//    back through `chat.completions.stream()` and `finalChatCompletion()` as tool_calls, none of its markup in
//    content, finish_reason "tool_calls"; a call cut off by max_tokens comes back as content.
// The model is a random-weight synth model (2 layers); the templates come from llama.cpp's source, where
// scripts/llamacpp.sh and tests/model/jinja_ref/fetch_templates.sh keep it (skipped, saying so, when absent).
//   TESSERA_BIN=build/release/bin/tessera node tools_client.test.mjs
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawn, execFileSync } from 'node:child_process';
import { existsSync, mkdtempSync } from 'node:fs';
import { tmpdir, homedir } from 'node:os';
import { join } from 'node:path';
import OpenAI from 'openai';
import Ajv2020 from 'ajv/dist/2020.js';

const BIN = process.env.TESSERA_BIN;
const ajv = new Ajv2020({ strict: false, allErrors: true });
const SRC = process.env.TESSERA_LLAMACPP_SRC ??
  join(process.env.TESSERA_CACHE ?? join(homedir(), '.cache', 'tessera'), 'llama.cpp', '3.21.1', 'src');
const TEMPLATES = join(SRC, 'models', 'templates');

function start(args) {
  return new Promise((resolve, reject) => {
    const proc = spawn(BIN, args, { stdio: ['ignore', 'pipe', 'pipe'] });
    let out = '', err = '';
    const timer = setTimeout(() => reject(new Error(`did not start: ${out} ${err}`)), 30000);
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
    if (!s || s.proc.exitCode !== null) return resolve(s ? s.proc.exitCode : 0);
    s.proc.removeAllListeners('exit');
    s.proc.on('exit', (code, sig) => resolve(code ?? sig));
    s.proc.kill('SIGTERM');
  });
}

const WEATHER = { type: 'object', properties: { city: { type: 'string', maxLength: 12 },
                                                days: { type: 'integer', minimum: 1, maximum: 7 } },
                  required: ['city', 'days'], additionalProperties: false };
const TOOLS = [
  { type: 'function', function: { name: 'get_weather', description: 'Weather in a city', parameters: WEATHER } },
  { type: 'function', function: { name: 'add', description: 'Add two numbers', parameters: {
    type: 'object', properties: { a: { type: 'integer' }, b: { type: 'integer' } }, required: ['a', 'b'] } } },
];
const validWeather = ajv.compile(WEATHER);
const ARITH = { type: 'object', properties: { a: { type: 'integer', minimum: -99, maximum: 99 },
                                              op: { enum: ['plus', 'minus'] },
                                              b: { type: 'integer', minimum: 0, maximum: 9 } },
                required: ['a', 'op', 'b'], additionalProperties: false };
const validArith = ajv.compile(ARITH);

// Each family: its template, the parser the node detects (or is told), and a call in the family's own syntax.
const FAMILIES = [
  { name: 'hermes', template: 'Qwen-Qwen3-0.6B.jinja',
    call: '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris", "days": 3}}\n</tool_call>' },
  { name: 'qwen3_coder', template: 'Qwen3-Coder.jinja',
    call: '<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n<parameter=days>\n3\n' +
          '</parameter>\n</function>\n</tool_call>' },
  { name: 'llama3_json', template: 'meta-llama-Llama-3.3-70B-Instruct.jinja',
    call: '{"name": "get_weather", "parameters": {"city": "Paris", "days": 3}}' },
  { name: 'pythonic', template: 'meta-llama-Llama-3.2-3B-Instruct.jinja', flag: 'pythonic',
    call: '[get_weather(city="Paris", days=3)]' },
  { name: 'mistral', template: 'mistralai-Mistral-Nemo-Instruct-2407.jinja',
    call: '[TOOL_CALLS][{"name": "get_weather", "arguments": {"city": "Paris", "days": 3}}]' },
  { name: 'mistral', template: 'Mistral-Small-3.2-24B-Instruct-2506.jinja',
    call: '[TOOL_CALLS]get_weather[ARGS]{"city": "Paris", "days": 3}' },
  { name: 'openai', template: 'openai-gpt-oss-120b.jinja',
    call: '<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{"city": "Paris", "days": 3}' },
];

let dir, model, tokenizer;
const haveTemplates = existsSync(TEMPLATES);

before(() => {
  assert.ok(BIN, 'set TESSERA_BIN');
  dir = mkdtempSync(join(tmpdir(), 'tessera-tools-'));
  model = join(dir, 'model.bin');
  tokenizer = join(dir, 'tok.bin');
  execFileSync(BIN, ['synth', '--shape', 'stories15M', '--layers', '2', '--seed', '11', '--max-seq-len', '4096',
                     '--out', model, '--tokenizer-out', tokenizer]);
});

for (const family of FAMILIES) {
  test(`${family.name} (${family.template})`, { skip: haveTemplates ? false : `no templates at ${TEMPLATES}` },
       async () => {
    const args = ['serve', '--model', model, '--tokenizer', tokenizer, '--port', '0',
                  '--chat-template', join(TEMPLATES, family.template)];
    if (family.flag) args.push('--tool-call-parser', family.flag);
    const node = await start(args);
    try {
      assert.match(node.log(), new RegExp(`tool-call parser: ${family.name}`));
      const client = new OpenAI({ apiKey: 'unused', baseURL: node.url + '/v1', maxRetries: 0, timeout: 120000 });
      const MODEL = (await client.models.list()).data[0].id;
      const messages = [{ role: 'user', content: 'What is the weather in Paris for the next days?' }];

      // 1. A forced call, streamed, assembled and run by the client's own runner.
      let ran = null, argDeltas = 0, names = 0;
      const runner = client.beta.chat.completions.runTools({
        model: MODEL, messages, stream: true, temperature: 1, seed: 3, max_tokens: 120,
        tool_choice: { type: 'function', function: { name: 'get_weather' } },
        tools: [{ type: 'function', function: { name: 'get_weather', description: 'Weather in a city',
                                                parameters: WEATHER, parse: JSON.parse,
                                                function: (a) => { ran = a; return { temperature: 21 }; } } },
                TOOLS[1]],
      });
      runner.on('tool_calls.function.arguments.delta', () => { argDeltas++; });
      runner.on('chunk', (c) => { if (c.choices[0]?.delta?.tool_calls?.[0]?.function?.name) names++; });
      await runner.done();
      assert.ok(ran, 'the client ran the function with the parsed arguments');
      assert.ok(validWeather(ran), `${JSON.stringify(ran)}: ${ajv.errorsText(validWeather.errors)}`);
      assert.ok(argDeltas > 1, `arguments arrived in ${argDeltas} pieces`);
      assert.equal(names, 1, 'the name came once, on the first delta');
      const completion = await runner.finalChatCompletion();
      assert.equal(completion.choices[0].finish_reason, 'tool_calls');
      const call = completion.choices[0].message.tool_calls[0];
      if (family.name === 'mistral') assert.match(call.id, /^[A-Za-z0-9]{9}$/, 'Mistral templates need 9-char ids');

      // 1b. tool_choice "required", streamed: in the family's own syntax where its grammar writes one (Hermes,
      // Llama 3 JSON, Qwen3-Coder XML), the JSON form otherwise; the call validates either way.
      for (const seed of [5, 6]) {
        const forced = client.beta.chat.completions.stream({
          model: MODEL, messages, temperature: 1, seed, max_tokens: 200, tool_choice: 'required',
          parallel_tool_calls: false, tools: [{ type: 'function', function: { name: 'arith', description: 'Arithmetic', parameters: ARITH } }] });
        let pieces = 0;
        forced.on('tool_calls.function.arguments.delta', () => { pieces++; });
        const done = await forced.finalChatCompletion();
        assert.equal(done.choices[0].finish_reason, 'tool_calls', JSON.stringify(done.choices[0]));
        assert.equal(done.choices[0].message.content ?? '', '');
        const [only] = done.choices[0].message.tool_calls;
        assert.equal(only.function.name, 'arith');
        const parsed = JSON.parse(only.function.arguments);
        assert.ok(validArith(parsed), `${only.function.arguments}: ${ajv.errorsText(validArith.errors)}`);
        assert.ok(pieces > 1, `arguments arrived in ${pieces} pieces`);
      }

      // 2. The conversation goes back in through the family's template: the call and its result are rendered.
      const history = runner.messages;
      assert.deepEqual(history.map((m) => m.role), ['user', 'assistant', 'tool']);
      const first = await client.chat.completions.create({ model: MODEL, messages, tools: TOOLS, max_tokens: 1 });
      const next = await client.chat.completions.create({ model: MODEL, messages: history, tools: TOOLS,
                                                          max_tokens: 1 });
      assert.ok(next.usage.prompt_tokens > first.usage.prompt_tokens + 10,
                `${next.usage.prompt_tokens} vs ${first.usage.prompt_tokens}: the call and its result are in the prompt`);

      // 3. A call in the family's own syntax, as the model would write it, streamed back.
      const tokenized = await (await fetch(node.url + '/tokenize', {
        method: 'POST', headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ model: MODEL, prompt: family.call, add_special_tokens: false }) })).json();
      const tokens = tokenized.tokens;
      const stream = client.beta.chat.completions.stream({
        model: MODEL, messages, tools: TOOLS, max_tokens: tokens.length, temperature: 0,
        tessera_resume: { tokens, text_bytes: 0 } });
      let content = '';
      stream.on('content', (delta) => { content += delta; });
      const free = await stream.finalChatCompletion();
      const msg = free.choices[0].message;
      assert.equal(free.choices[0].finish_reason, 'tool_calls', JSON.stringify(free));
      assert.equal(msg.tool_calls.length, 1, JSON.stringify(msg));
      assert.equal(msg.tool_calls[0].function.name, 'get_weather');
      assert.deepEqual(JSON.parse(msg.tool_calls[0].function.arguments), { city: 'Paris', days: 3 });
      assert.equal(content.trim(), '', `no markup in content: ${JSON.stringify(content)}`);

      // 4. Cut off by max_tokens: the text comes back as content, no call.
      // Cut inside the arguments (in "Paris"): the tokens whose text ends there.
      const detok = async (ids) => (await (await fetch(node.url + '/detokenize', {
        method: 'POST', headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ model: MODEL, tokens: ids }) })).json()).prompt;
      let half = tokens.length - 1;
      while (half > 1 && (await detok(tokens.slice(0, half))).length > family.call.indexOf('Paris') + 3) half--;
      const cut = await client.chat.completions.create({
        model: MODEL, messages, tools: TOOLS, max_tokens: half, temperature: 0,
        tessera_resume: { tokens: tokens.slice(0, half), text_bytes: 0 } });
      assert.equal(cut.choices[0].finish_reason, 'length');
      assert.equal(cut.choices[0].message.tool_calls, undefined, JSON.stringify(cut.choices[0].message));
      assert.ok(cut.choices[0].message.content.length > 10, JSON.stringify(cut.choices[0].message));
    } finally {
      assert.equal(await stop(node), 0, 'SIGTERM ends the server cleanly');
    }
  });
}

after(() => {});
