// The fleet dashboard's script (index.html, docs/dashboard.md). Every second it fetches /dashboard/api/state
// and redraws: the node table, uPlot charts of the router's per-second TTFT, TPOT and throughput, KV use per
// node and link traffic, the link table and the planner's timeline. Text from the server (node URLs, planner
// reasons) goes in through textContent only, never as HTML. No eval, no inline code (the page's CSP forbids
// both). window.tesseraDashboard exposes the charts and the last state, for the browser test.
'use strict';

(function () {
  const POLL_MS = 1000;
  const TIMELINE_S = 600;  // the planner timeline shows the last ten minutes
  const MIN_WINDOW_S = 60;  // the live charts show at least the last minute
  const COLORS = ['#2563eb', '#dc2626', '#16a34a', '#9333ea', '#ea580c', '#0891b2', '#be185d', '#4d7c0f'];
  const dash = { charts: {}, state: null, polls: 0, errors: 0, lastError: null };
  window.tesseraDashboard = dash;

  const $ = (id) => document.getElementById(id);
  function el(tag, text, cls) {
    const e = document.createElement(tag);
    if (text !== undefined && text !== null) e.textContent = String(text);
    if (cls) e.className = cls;
    return e;
  }
  function fmtNum(v, digits) {
    if (v === null || v === undefined || Number.isNaN(v)) return '–';
    return Number(v).toFixed(digits === undefined ? 0 : digits);
  }
  function fmtBytes(v) {
    if (v === null || v === undefined) return '–';
    const units = ['B', 'KB', 'MB', 'GB', 'TB'];
    let i = 0;
    while (v >= 1000 && i < units.length - 1) { v /= 1000; i++; }
    return `${v.toFixed(i === 0 ? 0 : 1)} ${units[i]}`;
  }
  function fmtTime(ms) {
    return new Date(ms).toLocaleTimeString([], { hour12: false });
  }
  // A node's short name: host:port of its URL.
  function shortName(url) {
    return (url || '').replace(/^https?:\/\//, '');
  }
  function banner(text) {
    const b = $('banner');
    b.hidden = !text;
    b.textContent = text || '';
  }

  // ---- charts ---------------------------------------------------------------------------------------------

  const haveCharts = typeof window.uPlot === 'function';

  function chartWidth(id) {
    const w = $(id).clientWidth;
    return Math.max(300, w > 0 ? w : 420);
  }
  function makeChart(id, series, yLabel, yRange) {
    if (!haveCharts) return null;
    const opts = {
      width: chartWidth(id),
      height: 200,
      scales: { x: { time: true }, y: yRange ? { range: yRange } : {} },
      series: [{}].concat(series.map((s, i) => ({
        label: s.label, stroke: s.color || COLORS[i % COLORS.length], width: 1.5,
        spanGaps: false, points: { show: false },
        value: (u, v) => (v === null || v === undefined ? '–' : s.fmt ? s.fmt(v) : v.toFixed(1)),
      }))),
      axes: [{}, { label: yLabel, size: 60 }],
      legend: { live: true },
    };
    const data = [[]].concat(series.map(() => []));
    const target = $(id);
    target.textContent = '';
    return new window.uPlot(opts, data, target);
  }
  function setData(name, data) {
    const c = dash.charts[name];
    if (c) c.setData(data);
  }

  function ensureCharts() {
    if (dash.charts.ttft || !haveCharts) return;
    dash.charts.ttft = makeChart('chart-ttft', [{ label: 'mean' }, { label: 'max' }], 'ms');
    dash.charts.tpot = makeChart('chart-tpot', [{ label: 'mean' }, { label: 'max' }], 'ms');
    dash.charts.throughput = makeChart('chart-throughput',
      [{ label: 'output tokens/s' }, { label: 'requests/s' }, { label: 'errors/s', color: '#b91c1c' }], 'per second');
    dash.charts.link = makeChart('chart-link', [{ label: 'KV bytes/s', fmt: fmtBytes }], 'bytes/s');
  }

  // The KV chart has one series per node; it is rebuilt when the set of nodes changes.
  let kvNodes = '';
  function drawKv(kv) {
    if (!haveCharts) return;
    const urls = Object.keys(kv.nodes || {}).sort();
    const key = urls.join('\n');
    if (key !== kvNodes || !dash.charts.kv) {
      if (dash.charts.kv) dash.charts.kv.destroy();
      dash.charts.kv = makeChart('chart-kv', urls.map((u) => ({ label: shortName(u), fmt: (v) => `${(v * 100).toFixed(0)}%` })),
        'fraction', [0, 1]);
      kvNodes = key;
    }
    setData('kv', [kv.t || []].concat(urls.map((u) => kv.nodes[u])));
  }

  // ---- tables ---------------------------------------------------------------------------------------------

  function health(n) {
    if (n.draining) return ['draining', 'health-draining'];
    if (!n.healthy) return ['down', 'health-down'];
    if (n.error) return ['in rotation (sample failed)', 'health-draining'];
    return ['in rotation', 'health-ok'];
  }
  function drawNodes(nodes) {
    const body = $('nodes').tBodies[0];
    body.textContent = '';
    for (const n of nodes) {
      const tr = el('tr');
      tr.dataset.url = n.url;
      const name = el('td', shortName(n.url));
      name.title = n.url + (n.host_id ? ` (host ${n.host_id})` : '');
      tr.append(name);
      tr.append(el('td', n.role, `role role-${n.role}`));
      tr.append(el('td', (n.models || []).join(', ') || '–', 'model'));
      tr.append(el('td', n.backend || '–'));
      tr.append(el('td', n.device || '–', 'device'));
      const [h, cls] = health(n);
      const ht = el('td', h, cls);
      if (n.error) ht.title = n.error;
      tr.append(ht);
      tr.append(el('td', fmtNum(n.in_flight), 'num'));
      tr.append(el('td', `${fmtNum(n.waiting)} / ${fmtNum(n.running)}`, 'num'));
      tr.append(el('td', fmtNum(n.tokens_per_s, 1), 'num'));
      const kv = el('td');
      if (n.kv_use !== null && n.kv_use !== undefined) {
        const bar = el('span', null, 'kvbar');
        const fill = el('span');
        fill.style.width = `${Math.min(100, Math.max(0, n.kv_use * 100)).toFixed(1)}%`;
        bar.append(fill);
        kv.append(bar, document.createTextNode(`${n.kv_blocks_used} / ${n.kv_blocks_total}`));
      } else {
        kv.textContent = '–';
      }
      tr.append(kv);
      // The prefix cache's hit rate per tier (device, then the host connector's host and disk, where it has them).
      const rates = n.prefix_hit_rate || {};
      const tiers = ['device', 'host', 'disk'].filter((t) => rates[t] !== undefined);
      tr.append(el('td', tiers.length ? tiers.map((t) => `${t} ${(rates[t] * 100).toFixed(0)}%`).join(' · ') : '–',
                   'hits'));
      tr.append(el('td', fmtNum(n.requests_total), 'num'));
      tr.append(el('td', fmtNum(n.failures_total), 'num'));
      body.append(tr);
    }
  }
  function drawLinks(link) {
    const body = $('links').tBodies[0];
    body.textContent = '';
    const pairs = link.pairs || [];
    if (pairs.length === 0) {
      const tr = el('tr');
      const td = el('td', 'no prefill → decode traffic measured yet', 'muted');
      td.colSpan = 4;
      tr.append(td);
      body.append(tr);
    }
    for (const p of pairs) {
      const tr = el('tr');
      tr.append(el('td', p.prefill ? shortName(p.prefill) : '(all prefill nodes)'));
      tr.append(el('td', shortName(p.decode)));
      tr.append(el('td', fmtBytes(p.bytes_total), 'num'));
      tr.append(el('td', `${fmtBytes(p.bytes_per_s)}/s`, 'num'));
      body.append(tr);
    }
  }

  // ---- planner --------------------------------------------------------------------------------------------

  function drawPlanner(p, nowMs) {
    const pill = $('planner-state');
    const reason = $('planner-reason');
    const body = $('decisions').tBodies[0];
    body.textContent = '';
    const marks = $('timeline');
    for (const m of Array.from(marks.querySelectorAll('.mark, .edge'))) m.remove();
    let label = 'no planner';
    let cls = 'none';
    let text = '';
    if (p.status === 'no_ctrl') {
      text = 'This router has no control plane, so no planner can publish decisions to it.';
    } else if (p.status === 'absent') {
      text = 'No planner has written its history (/tessera/planner/decisions) to the control plane.';
    } else if (p.status === 'unreachable') {
      label = 'control plane unreachable'; cls = 'unreachable'; text = p.error;
    } else if (p.status === 'invalid') {
      label = 'unreadable history'; cls = 'invalid'; text = p.error;
    } else if (p.status === 'ok') {
      label = p.state; cls = p.state;
      text = `${p.reason || ''} (updated ${fmtTime(p.updated_ms)})`;
      if (p.dropped > 0) text += `; ${p.dropped} older or unreadable decisions not shown`;
    }
    pill.textContent = label;
    pill.className = `pill ${cls}`;
    reason.textContent = text;
    const decisions = p.status === 'ok' ? p.decisions : [];
    const from = nowMs - TIMELINE_S * 1000;
    const left = el('span', `−${TIMELINE_S / 60} min`, 'edge');
    left.style.left = '0';
    const right = el('span', 'now', 'edge');
    right.style.right = '0';
    marks.append(left, right);
    for (const d of decisions) {
      if (d.ts_ms < from || d.ts_ms > nowMs + 5000) continue;
      const m = el('span', null, `mark ${d.action}${d.applied ? '' : ' skipped'}`);
      m.style.left = `${Math.min(100, ((d.ts_ms - from) / (TIMELINE_S * 1000)) * 100).toFixed(2)}%`;
      m.title = `${fmtTime(d.ts_ms)} ${d.action} ${d.node} ${d.from}→${d.to}: ${d.reason}`;
      marks.append(m);
    }
    for (const d of decisions.slice().reverse().slice(0, 50)) {
      const tr = el('tr');
      tr.append(el('td', fmtTime(d.ts_ms)));
      tr.append(el('td', d.action));
      tr.append(el('td', d.node || '–'));
      tr.append(el('td', d.from || d.to ? `${d.from || '–'} → ${d.to || '–'}` : '–'));
      tr.append(el('td', d.predicted_gain === null ? '–' : `${(d.predicted_gain * 100).toFixed(1)}%`, 'num'));
      tr.append(el('td', d.applied ? 'yes' : 'no'));
      tr.append(el('td', d.reason, 'reason'));
      body.append(tr);
    }
  }

  // ---- polling --------------------------------------------------------------------------------------------

  function draw(s) {
    dash.state = s;
    const inRotation = s.nodes.filter((n) => n.in_rotation).length;
    $('summary').textContent = `${s.nodes.length} nodes, ${inRotation} in rotation · strategy ${s.strategy}`;
    $('updated').textContent = `updated ${fmtTime(s.now_ms)}`;
    $('footer').textContent = s.chart_library ? `charts: ${s.chart_library}` : '';
    if (!haveCharts) {
      banner('Charts are unavailable: this tessera binary was built without uPlot. Run scripts/install-deps ' +
             '(it installs the pinned npm package) and build again.');
    } else {
      banner('');
    }
    drawNodes(s.nodes);
    ensureCharts();
    // The router keeps minutes of seconds; the charts start at the first second with traffic (at least the
    // last MIN_WINDOW_S seconds), so a fresh router's few points are not squeezed against the right edge.
    const sr = s.series;
    const firstBusy = sr.requests.findIndex((n) => n > 0);
    const from = Math.max(0, Math.min(firstBusy < 0 ? sr.t.length : firstBusy, sr.t.length - MIN_WINDOW_S));
    const cut = (a) => a.slice(from);
    setData('ttft', [cut(sr.t), cut(sr.ttft_ms), cut(sr.ttft_max_ms)]);
    setData('tpot', [cut(sr.t), cut(sr.tpot_ms), cut(sr.tpot_max_ms)]);
    setData('throughput', [cut(sr.t), cut(sr.tokens_per_s), cut(sr.requests), cut(sr.errors)]);
    setData('link', [s.link.t, s.link.bytes_per_s]);
    drawKv(s.kv);
    drawLinks(s.link);
    drawPlanner(s.planner, s.now_ms);
  }

  async function poll() {
    try {
      const r = await fetch('/dashboard/api/state', { cache: 'no-store', credentials: 'same-origin' });
      if (!r.ok) throw new Error(`/dashboard/api/state answered ${r.status}`);
      draw(await r.json());
      dash.polls++;
      dash.lastError = null;
    } catch (e) {
      dash.errors++;
      dash.lastError = String(e);
      banner(`Cannot read the router's state: ${e.message || e}`);
    } finally {
      setTimeout(poll, POLL_MS);
    }
  }

  window.addEventListener('resize', () => {
    for (const [name, c] of Object.entries(dash.charts)) {
      if (c) c.setSize({ width: chartWidth(`chart-${name}`), height: 200 });
    }
  });
  poll();
})();
