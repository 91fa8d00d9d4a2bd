// The official OpenAI Node client over TLS: tessera route with --tls-cert/--tls-key in front of a tessera
// serve node that also speaks TLS (the router reaches it over https, trusting --tls-ca), every process
// holding one cluster token. The certificate authority is made here with the openssl CLI and given to Node
// as NODE_EXTRA_CA_CERTS (read only when Node starts, so this script re-runs itself with it set).
//   TESSERA_BIN=build/release/bin/tessera TESSERA_MODEL_DIR=../shared/models/stories260K node tls_client.test.mjs
import { spawn, spawnSync, execFileSync } from 'node:child_process';
import { mkdtempSync, writeFileSync, chmodSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';

if (!process.env.TESSERA_TLS_DIR) {
  const dir = mkdtempSync(join(tmpdir(), 'tessera-tls-'));
  const ec = ['-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:prime256v1', '-nodes'];
  const ssl = (args) => execFileSync('openssl', args, { cwd: dir, stdio: ['ignore', 'ignore', 'pipe'] });
  ssl(['req', '-x509', ...ec, '-keyout', 'ca.key', '-out', 'ca.pem', '-days', '2', '-subj', '/CN=tessera test CA']);
  ssl(['req', ...ec, '-keyout', 'server.key', '-out', 'server.csr', '-subj', '/CN=127.0.0.1']);
  writeFileSync(join(dir, 'ext.cnf'), 'subjectAltName=IP:127.0.0.1,DNS:localhost\n');
  ssl(['x509', '-req', '-in', 'server.csr', '-CA', 'ca.pem', '-CAkey', 'ca.key', '-CAcreateserial', '-out',
       'server.pem', '-days', '2', '-extfile', 'ext.cnf']);
  writeFileSync(join(dir, 'cluster-token'), execFileSync('openssl', ['rand', '-hex', '32']));
  chmodSync(join(dir, 'cluster-token'), 0o600);
  const r = spawnSync(process.execPath, [fileURLToPath(import.meta.url)], {
    stdio: 'inherit',
    env: { ...process.env, TESSERA_TLS_DIR: dir, NODE_EXTRA_CA_CERTS: join(dir, 'ca.pem') },
  });
  rmSync(dir, { recursive: true, force: true });
  process.exit(r.status ?? 1);
}

const { test, before, after } = await import('node:test');
const assert = (await import('node:assert/strict')).default;
const OpenAI = (await import('openai')).default;

const BIN = process.env.TESSERA_BIN;
const MODEL_DIR = process.env.TESSERA_MODEL_DIR;
const DIR = process.env.TESSERA_TLS_DIR;
const MODEL = 'stories260K';
const KEY = 'sk-tls-test';
const TLS = ['--tls-cert', join(DIR, 'server.pem'), '--tls-key', join(DIR, 'server.key')];
const TOKEN = ['--cluster-token-file', join(DIR, 'cluster-token')];

function start(args) {
  return new Promise((resolve, reject) => {
    const proc = spawn(BIN, args, { stdio: ['ignore', 'pipe', 'pipe'] });
    let out = '', err = '';
    const timer = setTimeout(() => reject(new Error(`did not start: ${out} ${err}`)), 15000);
    proc.stderr.on('data', (d) => { err += d; });
    proc.stdout.on('data', (d) => {
      out += d;
      const m = out.match(/listening on (https?:\/\/[\d.]+:(\d+))/);
      if (m) { clearTimeout(timer); resolve({ proc, url: m[1] }); }
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

function reference(prompt, maxTokens) {
  const out = execFileSync(BIN, ['generate', '--model', MODEL_DIR, '--prompt', prompt, '--max-tokens', String(maxTokens),
                                 '--temperature', '0', '--no-echo', '--quiet']).toString();
  return out.endsWith('\n') ? out.slice(0, -1) : out;
}

let node, router, client;

before(async () => {
  assert.ok(BIN && MODEL_DIR, 'set TESSERA_BIN and TESSERA_MODEL_DIR');
  node = await start(['serve', '--model', MODEL_DIR, '--port', '0', '--chat-template', 'plain', '--api-key', 'sk-node',
                      ...TLS, ...TOKEN]);
  assert.match(node.url, /^https:/);
  router = await start(['route', '--port', '0', '--nodes', node.url, '--api-key', KEY, '--tls-ca', join(DIR, 'ca.pem'),
                        ...TLS, ...TOKEN]);
  assert.match(router.url, /^https:/);
  client = new OpenAI({ apiKey: KEY, baseURL: router.url + '/v1', maxRetries: 0, timeout: 60000 });
  // Until the router's probes (over https) put the node in rotation.
  for (let i = 0; i < 200; i++) {
    const h = await fetch(router.url + '/health').catch(() => null);
    if (h && h.status === 200) break;
    await new Promise((r) => setTimeout(r, 50));
  }
});

after(async () => {
  assert.equal(await stop(router), 0, 'SIGTERM ends the router cleanly');
  await stop(node);
});

test('completions and a streamed chat over TLS equal tessera generate', async () => {
  const prompt = 'Once upon a time';
  const r = await client.completions.create({ model: MODEL, prompt, max_tokens: 30, temperature: 0 });
  assert.equal(r.choices[0].text, reference(prompt, 30));
  const content = 'The cat sat on';
  const stream = await client.chat.completions.create({ model: MODEL, messages: [{ role: 'user', content }],
                                                        max_tokens: 25, temperature: 0, stream: true });
  let text = '', events = 0;
  for await (const c of stream) {
    events++;
    text += c.choices[0]?.delta?.content ?? '';
  }
  assert.equal(text, reference(content, 25));
  assert.ok(events > 5, 'tokens arrive as separate events over TLS');
});

test('a wrong API key over TLS is an AuthenticationError', async () => {
  const bad = new OpenAI({ apiKey: 'sk-wrong', baseURL: router.url + '/v1', maxRetries: 0 });
  await assert.rejects(bad.completions.create({ model: MODEL, prompt: 'x', max_tokens: 2 }),
                       (e) => e instanceof OpenAI.AuthenticationError && e.status === 401);
});

test('plain HTTP to the TLS port gets no answer', async () => {
  const plain = router.url.replace('https://', 'http://');
  await assert.rejects(fetch(plain + '/health', { signal: AbortSignal.timeout(5000) }));
});

test('the node behind the router wants its own API key from clients that reach it directly', async () => {
  const direct = new OpenAI({ apiKey: KEY, baseURL: node.url + '/v1', maxRetries: 0 });
  await assert.rejects(direct.completions.create({ model: MODEL, prompt: 'x', max_tokens: 2 }),
                       (e) => e instanceof OpenAI.AuthenticationError);
  const keyed = new OpenAI({ apiKey: 'sk-node', baseURL: node.url + '/v1', maxRetries: 0 });
  const r = await keyed.completions.create({ model: MODEL, prompt: 'Once upon a time', max_tokens: 5, temperature: 0 });
  assert.equal(r.choices[0].text, reference('Once upon a time', 5));
});
