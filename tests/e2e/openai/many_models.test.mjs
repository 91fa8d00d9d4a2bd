// One router, two models of different families (stories260K: llama; a synthetic Qwen3 GGUF: qwen3), each on its own
// prefill + decode pair (four nodes), started by `tessera up` from a spec with `models:`. The official OpenAI client
// reaches each model by name and gets that model's single-node greedy text; an unknown name is a 404 in OpenAI's
// shape (NotFoundError, code model_not_found); /v1/models lists both; and every PD pair the router chose is within
// one model (the prefill node it names, shown to a caller holding the cluster credential, is that model's).
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawn, execFileSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import OpenAI from 'openai';

const BIN = path.resolve(process.env.TESSERA_BIN);
const STORIES = path.resolve(process.env.TESSERA_MODEL_DIR);

function reference(model, prompt, n) {
  return execFileSync(BIN, ['generate', '--model', model, '--prompt', prompt, '--max-tokens', String(n),
                            '--temperature', '0', '--no-echo', '--quiet']).toString().replace(/\n$/, '');
}

test('tessera up: two models behind one router, reached by name, PD pairs within a model', async () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'tessera-many-models-'));
  const qwen = path.join(dir, 'qwen3-synth.gguf');
  execFileSync(BIN, ['synth', '--shape', 'qwen3-0.6b', '--small', '--format', 'gguf', '--seed', '3', '--out', qwen],
               { stdio: 'ignore' });
  const spec = path.join(dir, 'cluster.yaml');
  fs.writeFileSync(spec, [
    'models:',
    `  - {name: stories, path: ${STORIES}, chat_template: plain}`,
    '  - {name: qwen3-synth, path: qwen3-synth.gguf, chat_template: plain}',
    'router: {port: 0, strategy: least_latency}',
    'nodes:',
    '  - {name: stories-prefill, role: prefill, backend: cpu, threads: 1, model: stories}',
    '  - {name: stories-decode, role: decode, backend: ref, model: stories, args: ["--pd-min-tokens", "2"]}',
    '  - {name: qwen-prefill, role: prefill, backend: cpu, threads: 1, model: qwen3-synth}',
    '  - {name: qwen-decode, role: decode, backend: cpu, threads: 1, model: qwen3-synth, args: ["--pd-min-tokens", "2"]}',
    '',
  ].join('\n'));
  const up = spawn(BIN, ['up', spec], { stdio: ['ignore', 'pipe', 'pipe'], cwd: os.homedir() });
  let err = '', out = '';
  up.stderr.on('data', (d) => { err += d; });
  const url = await new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`cluster did not start: ${err}`)), 120000);
    up.stdout.on('data', (d) => {
      out += d;
      const m = out.match(/OpenAI API at (http:\/\/[\d.]+:\d+)\/v1/);
      if (m) { clearTimeout(timer); resolve(m[1]); }
    });
    up.on('exit', (code) => { clearTimeout(timer); reject(new Error(`tessera up exited ${code}: ${err}`)); });
  });
  try {
    // "NAME (ROLE, BACKEND, MODEL) at URL", one line per node.
    const nodes = {};
    for (const m of err.matchAll(/tessera up: (\S+) \((prefill|decode), \w+, (\S+)\) at (http:\/\/[\d.]+:\d+)/g)) {
      nodes[m[1]] = { role: m[2], model: m[3], url: m[4] };
    }
    assert.equal(Object.keys(nodes).length, 4, `four nodes: ${err}`);
    const logs = out.match(/logs in (\S+)\)/)[1];
    const token = fs.readFileSync(path.join(logs, 'cluster-token'), 'utf8').trim();

    const client = new OpenAI({ apiKey: 'unused', baseURL: url + '/v1', maxRetries: 0, timeout: 120000 });
    const listed = (await client.models.list()).data.map((m) => m.id).sort();
    assert.deepEqual(listed, ['qwen3-synth', 'stories']);

    const prompts = ['Once upon a time', 'The little dog', 'Tom and Lily went'];
    for (const [model, file] of [['stories', STORIES], ['qwen3-synth', qwen]]) {
      for (const prompt of prompts) {
        const r = await client.completions.create({ model, prompt, max_tokens: 10, temperature: 0 });
        assert.equal(r.model, model);
        assert.equal(r.choices[0].text, reference(file, prompt, 10), `${model}: ${prompt}`);
      }
    }
    // Chat reaches each by name too.
    const chat = await client.chat.completions.create({
      model: 'qwen3-synth', messages: [{ role: 'user', content: 'Hi there' }], max_tokens: 4, temperature: 0 });
    assert.equal(chat.model, 'qwen3-synth');

    await assert.rejects(
      client.completions.create({ model: 'no-such-model', prompt: 'x', max_tokens: 2 }),
      (e) => {
        assert.ok(e instanceof OpenAI.NotFoundError, `a NotFoundError: ${e}`);
        assert.equal(e.status, 404);
        assert.equal(e.code, 'model_not_found');
        assert.equal(e.param, 'model');
        return true;
      });

    // The router names the pair it chose to a caller holding the cluster credential: never across models.
    const prefillOf = (model) => Object.values(nodes).find((n) => n.role === 'prefill' && n.model === model).url;
    const decodeOf = (model) => Object.values(nodes).find((n) => n.role === 'decode' && n.model === model).url;
    for (let i = 0; i < 6; ++i) {
      const model = i % 2 ? 'stories' : 'qwen3-synth';
      const r = await fetch(url + '/v1/completions', {
        method: 'POST',
        headers: { 'content-type': 'application/json', 'x-tessera-cluster-token': token },
        body: JSON.stringify({ model, prompt: prompts[i % 3], max_tokens: 3, temperature: 0 }),
      });
      assert.equal(r.status, 200, await r.text());
      assert.equal(r.headers.get('x-tessera-node'), decodeOf(model), model);
      assert.equal(r.headers.get('x-tessera-prefill-node'), prefillOf(model), model);
    }
  } finally {
    const code = await new Promise((resolve) => { up.removeAllListeners('exit'); up.on('exit', (c) => resolve(c)); up.kill('SIGTERM'); });
    assert.equal(code, 0, `tessera up exits cleanly: ${err}`);
    fs.rmSync(dir, { recursive: true, force: true });
  }
});
