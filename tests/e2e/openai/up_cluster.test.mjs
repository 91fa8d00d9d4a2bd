// `tessera up` with a router, a prefill node (cpu backend) and a decode node (ref backend), driven by the
// official OpenAI client: 50 concurrent streamed chat requests all complete, nothing is lost, and greedy
// outputs equal single-node generation. Then SIGTERM stops the whole cluster cleanly.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawn, execFileSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import OpenAI from 'openai';

const BIN = process.env.TESSERA_BIN;
const MODEL_DIR = process.env.TESSERA_MODEL_DIR;

function reference(prompt, n) {
  const out = execFileSync(BIN, ['generate', '--model', MODEL_DIR, '--prompt', prompt, '--max-tokens', String(n),
                                 '--temperature', '0', '--no-echo', '--quiet']).toString();
  return out.endsWith('\n') ? out.slice(0, -1) : out;
}

test('tessera up: router + prefill(cpu) + decode(ref) serve 50 concurrent streamed chats', async () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'tessera-up-test-'));
  const spec = path.join(dir, 'cluster.yaml');
  // A relative model path is read against the spec's folder, whatever the working directory is.
  fs.writeFileSync(spec, [
    `model: ${path.relative(dir, path.resolve(MODEL_DIR))}`,
    'chat_template: plain',
    'router: {port: 0, strategy: least_latency}',
    'nodes:',
    '  - {name: prefill-0, role: prefill, backend: cpu, threads: 1}',
    '  - {name: decode-0, role: decode, backend: ref, args: ["--pd-min-tokens", "4"]}',
    '',
  ].join('\n'));
  const up = spawn(path.resolve(BIN), ['up', spec], { stdio: ['ignore', 'pipe', 'pipe'], cwd: os.homedir() });
  let err = '', upOut = '';
  up.stdout.on('data', (d) => { upOut += d; });
  up.stderr.on('data', (d) => { err += d; });
  const url = await new Promise((resolve, reject) => {
    let out = '';
    const timer = setTimeout(() => reject(new Error(`cluster did not start: ${err}`)), 60000);
    up.stdout.on('data', (d) => {
      out += d;
      const m = out.match(/OpenAI API at (http:\/\/[\d.]+:\d+)\/v1/);
      if (m) { clearTimeout(timer); resolve(m[1]); }
    });
    up.on('exit', (code) => { clearTimeout(timer); reject(new Error(`tessera up exited ${code}: ${err}`)); });
  });
  try {
    assert.ok(upOut.includes(`tessera up: model ${path.resolve(MODEL_DIR)}\n`), `up did not name the model: ${upOut}`);
    const client = new OpenAI({ apiKey: 'unused', baseURL: url + '/v1', maxRetries: 0, timeout: 120000 });
    const subjects = ['Lily', 'Tom', 'the cat', 'a little dog', 'the sun', 'Max', 'the park', 'a big red ball',
                      'the girl', 'Sue'];
    const jobs = Array.from({ length: 50 }, (_, i) => ({
      content: `Once upon a time, ${subjects[i % subjects.length]} ${['went', 'saw', 'wanted', 'said', 'had'][i % 5]}`,
      n: 12 + (i % 4) * 4,
    }));
    const texts = await Promise.all(jobs.map(async (j) => {
      const stream = await client.chat.completions.create({
        model: 'stories260K', messages: [{ role: 'user', content: j.content }], max_tokens: j.n, temperature: 0, stream: true });
      let t = '', finish = null;
      for await (const c of stream) {
        t += c.choices[0]?.delta?.content ?? '';
        finish = c.choices[0]?.finish_reason ?? finish;
      }
      assert.ok(finish === 'length' || finish === 'stop', `finish ${finish}`);
      return t;
    }));
    const refs = new Map();
    jobs.forEach((j, i) => {
      const key = `${j.content}|${j.n}`;
      if (!refs.has(key)) refs.set(key, reference(j.content, j.n));
      assert.equal(texts[i], refs.get(key), j.content);
    });
  } finally {
    const code = await new Promise((resolve) => { up.removeAllListeners('exit'); up.on('exit', (c) => resolve(c)); up.kill('SIGTERM'); });
    assert.equal(code, 0, `tessera up exits cleanly: ${err}`);
    fs.rmSync(dir, { recursive: true, force: true });
  }
});
