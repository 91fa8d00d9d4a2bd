// The fleet dashboard in a real browser (issue 18 item 4): Debian's chromium, headless, driven by puppeteer-core
// (pinned in web/dashboard/package.json, installed by scripts/install-deps), against a live `tessera up` cluster
// (router with an API key, one prefill node and two decode nodes). The page must load with no console error,
// failed request or CSP violation, list every node the router knows with its role and backend, and its uPlot
// charts must receive data (TTFT, TPOT, throughput, KV use, link traffic) while requests flow; a planner
// history put in the control plane must show on the timeline. A browser without the key gets 401.
// Skips (exit 77, which ctest reports as skipped) when chromium or puppeteer-core is missing, saying which.
// With TESSERA_DASHBOARD_SCREENSHOT=FILE it saves a screenshot of the page there (docs/dashboard.png).
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { createRequire } from 'node:module';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';

const BIN = process.env.TESSERA_BIN;
const MODEL_DIR = process.env.TESSERA_MODEL_DIR;
const ROOT = process.env.TESSERA_SOURCE_DIR || path.resolve(path.dirname(new URL(import.meta.url).pathname), '../../..');
// CHROMIUM names the browser; by default Debian's.
const CHROMIUM = (process.env.CHROMIUM ? [process.env.CHROMIUM] : ['/usr/bin/chromium', '/usr/bin/chromium-browser'])
  .find((p) => fs.existsSync(p));
const KEY = 'sk-dashboard-test';

function skip(why) {
  console.log(`SKIP: ${why}`);
  process.exit(77);
}
if (!CHROMIUM) skip('chromium is not installed (scripts/install-deps installs Debian\'s chromium)');
let puppeteer;
try {
  puppeteer = createRequire(path.join(ROOT, 'web/dashboard/package.json'))('puppeteer-core');
} catch (e) {
  skip(`puppeteer-core is not installed in web/dashboard/node_modules (run scripts/install-deps): ${e.message}`);
}

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

async function startCluster(dir) {
  const spec = path.join(dir, 'cluster.yaml');
  fs.writeFileSync(spec, [
    `model: ${path.resolve(MODEL_DIR)}`,
    'chat_template: plain',
    `router: {port: 0, strategy: least_latency, args: ["--api-key", "${KEY}"]}`,
    'nodes:',
    '  - {name: prefill-0, role: prefill, backend: cpu, threads: 1}',
    '  - {name: decode-0, role: decode, backend: ref, args: ["--pd-min-tokens", "4"]}',
    '  - {name: decode-1, role: decode, backend: cpu, threads: 1, args: ["--pd-min-tokens", "4"]}',
    '',
  ].join('\n'));
  const up = spawn(path.resolve(BIN), ['up', spec], { stdio: ['ignore', 'pipe', 'pipe'] });
  let out = '', err = '';
  up.stderr.on('data', (d) => { err += d; });
  const ready = await new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`cluster did not start: ${err}`)), 90000);
    up.stdout.on('data', (d) => {
      out += d;
      const m = out.match(/OpenAI API at (http:\/\/[\d.]+:\d+)\/v1 \(\d+ processes, logs in (\S+)\)/);
      if (m) { clearTimeout(timer); resolve({ url: m[1], runDir: m[2] }); }
    });
    up.on('exit', (code) => { clearTimeout(timer); reject(new Error(`tessera up exited ${code}: ${err}`)); });
  });
  const ctrl = err.match(/control plane \(embedded\) at (http:\/\/[\d.]+:\d+)/);
  assert.ok(ctrl, `up did not name its control plane: ${err}`);
  const token = fs.readFileSync(path.join(ready.runDir, 'cluster-token'), 'utf8').trim();
  return { up, url: ready.url, ctrl: ctrl[1], token, stderr: () => err };
}

// The contract with the planner (docs/dashboard.md): its bounded history under /tessera/planner/decisions.
async function putPlannerHistory(ctrl, token) {
  const now = Date.now();
  const history = {
    updated_ms: now, state: 'acting', reason: 'prompts grew longer: decode pool idle, prefill queue at 3.2 s',
    decisions: [
      { ts_ms: now - 240000, action: 'keep', node: '', from: '', to: '', reason: 'within SLO', predicted_gain: 0, applied: false },
      { ts_ms: now - 120000, action: 're-role', node: 'decode-1', from: 'decode', to: 'prefill',
        reason: 'long prompts, short answers', predicted_gain: 0.23, applied: true },
      { ts_ms: now - 30000, action: 'scale-out', node: 'prefill-1', from: '', to: 'prefill',
        reason: 'burst', predicted_gain: 0.11, applied: false },
    ],
  };
  const r = await fetch(`${ctrl}/v1/ctrl/kv/put`, {
    method: 'POST', headers: { 'content-type': 'application/json', 'x-tessera-cluster-token': token },
    body: JSON.stringify({ key: '/tessera/planner/decisions', value: JSON.stringify(history), lease: 0 }),
  });
  assert.equal(r.status, 200, await r.text());
}

// Streamed completions with prompts long enough for remote prefill (and each new, so not prefix-cached).
function startLoad(url) {
  let stop = false, sent = 0, failed = 0, i = 0;
  const words = ['Lily', 'Tom', 'the cat', 'a dog', 'the sun', 'Max', 'the park', 'a ball', 'the girl', 'Sue'];
  const one = async () => {
    const n = i++;
    const prompt = `Once upon a time, ${words[n % words.length]} and ${words[(n * 7 + 3) % words.length]} went to ` +
                   `the ${n} big houses near the river and`;
    const r = await fetch(`${url}/v1/completions`, {
      method: 'POST', headers: { 'content-type': 'application/json', authorization: `Bearer ${KEY}` },
      body: JSON.stringify({ model: 'stories260K', prompt, max_tokens: 24, temperature: 0, stream: true }),
    });
    await r.text();
    sent++;
    if (r.status !== 200) failed++;
  };
  const loop = (async () => {
    while (!stop) {
      await Promise.all([one(), one()]);
      await sleep(150);
    }
  })();
  return { stop: async () => { stop = true; await loop; return { sent, failed }; } };
}

test('dashboard in chromium: loads cleanly, lists every node, charts receive data, planner on its timeline', async () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'tessera-dashboard-test-'));
  const cluster = await startCluster(dir);
  let browser, load;
  try {
    await putPlannerHistory(cluster.ctrl, cluster.token);
    load = startLoad(cluster.url);
    // What the router itself says: the nodes the page must list.
    const stateResp = await fetch(`${cluster.url}/dashboard/api/state`, { headers: { authorization: `Bearer ${KEY}` } });
    assert.equal(stateResp.status, 200);
    const nodeUrls = (await stateResp.json()).nodes.map((n) => n.url).sort();
    assert.equal(nodeUrls.length, 3, `the router knows 3 nodes: ${nodeUrls}`);

    browser = await puppeteer.launch({
      executablePath: CHROMIUM, headless: true,
      args: ['--no-sandbox', '--disable-gpu', '--disable-dev-shm-usage', '--window-size=1400,1000'],
      defaultViewport: { width: 1400, height: 1000 },
    });

    // Without the key, or with a wrong one: refused (chromium ends the navigation once the Basic challenge
    // cannot be met), and nothing of the page is served.
    for (const password of [null, 'wrong-key']) {
      const anon = await browser.newPage();
      if (password) await anon.authenticate({ username: 'operator', password });
      const outcome = await anon.goto(`${cluster.url}/dashboard`).then((r) => `HTTP ${r.status()}`, (e) => e.message);
      assert.match(outcome, /HTTP 401|ERR_INVALID_AUTH_CREDENTIALS/, `refused without the key (${password})`);
      assert.equal(await anon.evaluate(() => typeof window.tesseraDashboard), 'undefined');
      await anon.close();
    }

    const page = await browser.newPage();
    const problems = [];
    page.on('console', (m) => { if (m.type() === 'error' || m.type() === 'warn') problems.push(`console ${m.type()}: ${m.text()}`); });
    page.on('pageerror', (e) => problems.push(`page error: ${e.message}`));
    page.on('requestfailed', (r) => problems.push(`request failed: ${r.url()} ${r.failure()?.errorText}`));
    page.on('response', (r) => { if (r.status() >= 400) problems.push(`HTTP ${r.status()}: ${r.url()}`); });
    await page.authenticate({ username: 'operator', password: KEY });
    const resp = await page.goto(`${cluster.url}/dashboard`, { waitUntil: 'load' });
    assert.equal(resp.status(), 200);
    assert.match(resp.headers()['content-security-policy'], /script-src 'self'/);

    // Every node, with its role, model and backend.
    await page.waitForFunction((n) => document.querySelectorAll('#nodes tbody tr').length === n, { timeout: 60000 }, nodeUrls.length);
    const rows = await page.$$eval('#nodes tbody tr', (trs) => trs.map((tr) => ({
      url: tr.dataset.url, cells: Array.from(tr.cells).map((c) => c.textContent) })));
    assert.deepEqual(rows.map((r) => r.url).sort(), nodeUrls);
    const roles = rows.map((r) => r.cells[1]).sort();
    assert.deepEqual(roles, ['decode', 'decode', 'prefill']);
    for (const r of rows) {
      assert.equal(r.cells[2], 'stories260K', `the model each node serves: ${r.cells}`);
      assert.ok(['cpu', 'ref'].includes(r.cells[3]), `backend shown: ${r.cells}`);
      assert.notEqual(r.cells[4], '–', `device shown: ${r.cells}`);
      assert.match(r.cells[9], /\d+ \/ \d+/, `KV use shown: ${r.cells}`);
      assert.match(r.cells[10], /^device \d+%/, `the prefix cache's device hit rate shown: ${r.cells}`);
    }

    // Charts: uPlot instances whose series hold real numbers (TTFT and TPOT in ms, tokens/s, KV use, link bytes/s).
    const chartsHaveData = () => {
      const d = window.tesseraDashboard;
      const has = (name, series, positive) => {
        const c = d.charts[name];
        if (!c || !c.data || !c.data[series]) return false;
        return c.data[series].some((v) => typeof v === 'number' && (positive ? v > 0 : v >= 0));
      };
      return has('ttft', 1, true) && has('tpot', 1, true) && has('throughput', 1, true) && has('kv', 1, false) &&
             has('link', 1, true);
    };
    try {
      await page.waitForFunction(chartsHaveData, { timeout: 90000, polling: 500 });
    } catch (e) {
      const seen = await page.evaluate(() => Object.fromEntries(Object.entries(window.tesseraDashboard.charts)
        .map(([k, c]) => [k, c ? c.data.map((s) => s.filter((v) => v !== null).length) : null])));
      throw new Error(`charts did not receive data: ${JSON.stringify(seen)}`);
    }
    assert.equal(await page.$eval('#footer', (e) => e.textContent), 'charts: uPlot 1.6.32');
    // The link table names the pairs that carried KV.
    const links = await page.$$eval('#links tbody tr', (trs) => trs.map((tr) => tr.textContent));
    assert.ok(links.some((t) => t.includes(nodeUrls.find((u) => rows.find((r) => r.url === u).cells[1] === 'prefill').replace('http://', ''))),
              `links: ${links}`);

    // The planner's history, from the control plane.
    await page.waitForFunction(() => document.querySelector('#planner-state').textContent === 'acting', { timeout: 30000 });
    assert.equal(await page.$$eval('#decisions tbody tr', (r) => r.length), 3);
    assert.equal(await page.$$eval('#timeline .mark', (m) => m.length), 3);
    assert.match(await page.$eval('#decisions tbody tr', (r) => r.textContent), /scale-out/, 'newest first');

    const shot = process.env.TESSERA_DASHBOARD_SCREENSHOT;
    if (shot) {
      await sleep(20000);  // twenty more seconds of chart
      await page.screenshot({ path: shot, fullPage: true });
    }
    const { sent, failed } = await load.stop();
    load = null;
    assert.ok(sent > 0 && failed === 0, `requests: ${sent} sent, ${failed} failed`);
    assert.deepEqual(problems, [], 'no console error, failed request or HTTP error in the page');
  } finally {
    if (load) await load.stop();
    if (browser) await browser.close();
    const code = await new Promise((resolve) => { cluster.up.removeAllListeners('exit'); cluster.up.on('exit', (c) => resolve(c)); cluster.up.kill('SIGTERM'); });
    assert.equal(code, 0, `tessera up exits cleanly: ${cluster.stderr()}`);
    fs.rmSync(dir, { recursive: true, force: true });
  }
});
