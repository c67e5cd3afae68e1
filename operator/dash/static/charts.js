// The dashboard's charts and capacity panel: reads api/charts and
// api/capacity and draws them as SVG built node by node (no markup is
// parsed, nothing is loaded from elsewhere). Every bucket of a chart is
// focusable and carries its numbers (a title, an aria-label, data-value on
// each bar or point), and a data table under each chart holds the same.
'use strict';
(function () {
  const { el, table } = window.pidash;
  const NS = 'http://www.w3.org/2000/svg';
  const W = 640, H = 240, M = { l: 72, r: 12, t: 14, b: 40 };
  const refreshMs = Number(document.body.dataset.refreshMs) || 3000;
  const chartsMs = 60000;
  const capacityMs = Math.max(refreshMs * 5, 15000);

  function svg(tag, attrs, text) {
    const e = document.createElementNS(NS, tag);
    for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, String(v));
    if (text !== undefined) e.textContent = String(text);
    return e;
  }

  function money(micros) {
    if (micros === null || micros === undefined) return '-';
    const d = micros / 1e6;
    if (d === 0) return '$0';
    if (Math.abs(d) >= 100) return '$' + d.toFixed(0);
    if (Math.abs(d) >= 1) return '$' + d.toFixed(2);
    return '$' + d.toFixed(4);
  }

  // moneyTick is an axis label: cents are enough.
  function moneyTick(micros) {
    const d = micros / 1e6;
    return '$' + (d >= 100 ? d.toFixed(0) : d >= 0.1 || d === 0 ? d.toFixed(2) : d.toFixed(4));
  }

  function duration(ms) {
    if (ms === null || ms === undefined) return '-';
    if (ms < 1000) return Math.round(ms) + 'ms';
    const s = ms / 1000;
    if (s < 120) return (s < 10 ? s.toFixed(1) : Math.round(s)) + 's';
    if (s < 7200) return Math.round(s / 60) + 'm';
    return (s / 3600).toFixed(1) + 'h';
  }

  function count(n) { return n === null || n === undefined ? '-' : String(n); }
  function pct(x) { return x === null || x === undefined ? '-' : Math.round(x * 100) + '%'; }
  function day(iso) { return iso.slice(0, 10); }
  function hour(iso) { return iso.slice(0, 10) + ' ' + iso.slice(11, 16) + ' UTC'; }
  function shortDay(iso) { return iso.slice(5, 10); }
  function shortHour(iso) { return iso.slice(11, 13) === '00' ? iso.slice(5, 10) : iso.slice(11, 16); }

  // niceMax rounds max up to 1, 2, 2.5 or 5 times a power of ten.
  function niceMax(max) {
    if (!(max > 0)) return 1;
    const p = Math.pow(10, Math.floor(Math.log10(max)));
    for (const m of [1, 2, 2.5, 5, 10]) if (m * p >= max) return m * p;
    return 10 * p;
  }

  // draw renders spec into the chart box id: spec.points are the buckets
  // ({when, label, values: one number or null per key}), spec.keys their
  // series, spec.fmt a value's text. Bars are stacked, or spec.line draws
  // one line per key.
  function draw(id, spec) {
    const box = document.querySelector('#' + id + ' .plot');
    const wasOpen = box.querySelector('details') && box.querySelector('details').open;
    const cls = (i) => (spec.classes && spec.classes[i]) || 's' + (i % 9);
    const n = spec.points.length;
    const heights = spec.points.map((p) => spec.line
      ? Math.max(0, ...p.values.map((v) => v || 0))
      : p.values.reduce((a, v) => a + (v || 0), 0));
    const top = Math.max(niceMax(Math.max(0, ...heights)), spec.minTop || 0);
    const iw = W - M.l - M.r, ih = H - M.t - M.b, bw = iw / Math.max(n, 1);
    const y = (v) => M.t + ih - (v / top) * ih;
    const root = svg('svg', { viewBox: '0 0 ' + W + ' ' + H, class: 'chart-svg', role: 'group',
      'aria-labelledby': id + '-title', 'data-chart': id });
    for (let i = 0; i <= 4; i++) {
      const v = (top * i) / 4;
      root.append(svg('line', { x1: M.l, x2: W - M.r, y1: y(v), y2: y(v), class: i ? 'grid' : 'axis-line' }));
      root.append(svg('text', { x: M.l - 6, y: y(v) + 4, 'text-anchor': 'end', class: 'tick' }, (spec.tick || spec.fmt)(v)));
    }
    root.append(svg('text', { x: 12, y: M.t + ih / 2, transform: 'rotate(-90 12 ' + (M.t + ih / 2) + ')',
      'text-anchor': 'middle', class: 'axis-title' }, spec.yTitle));
    root.append(svg('text', { x: M.l + iw / 2, y: H - 4, 'text-anchor': 'middle', class: 'axis-title' }, spec.xTitle));
    const every = Math.ceil(n / 8);
    spec.points.forEach((p, i) => {
      if (i % every === 0) {
        root.append(svg('text', { x: M.l + bw * (i + 0.5), y: M.t + ih + 16, 'text-anchor': 'middle', class: 'tick' }, p.label));
      }
    });
    const lines = spec.keys.map(() => []);
    spec.points.forEach((p, i) => {
      const parts = spec.keys.map((k, j) => [k, p.values[j]]).filter(([, v]) => v !== null && v !== undefined && (spec.line || spec.keys.length === 1 || v > 0));
      const words = parts.length ? parts.map(([k, v]) => k + ' ' + spec.fmt(v)).join(', ') : 'none';
      const text = p.when + ': ' + words + (spec.total ? '; ' + spec.total(p) : '');
      const g = svg('g', { tabindex: 0, class: 'bucket', 'data-when': p.when, 'aria-label': text });
      g.append(svg('title', {}, text));
      // A transparent column makes the whole bucket hoverable.
      g.append(svg('rect', { x: M.l + bw * i, y: M.t, width: bw, height: ih, class: 'hit' }));
      let base = 0;
      p.values.forEach((v, j) => {
        if (v === null || v === undefined) {
          if (spec.line) lines[j].push(null); // a gap breaks the line
          return;
        }
        if (spec.line) {
          const cx = M.l + bw * (i + 0.5);
          lines[j].push([cx, y(v)]);
          g.append(svg('circle', { cx: cx, cy: y(v), r: 3, class: 'dot ' + cls(j), 'data-key': spec.keys[j], 'data-value': v }));
          return;
        }
        if (v <= 0) return;
        g.append(svg('rect', { x: M.l + bw * i + 1, y: y(base + v), width: Math.max(bw - 2, 1),
          height: Math.max(y(base) - y(base + v), 0.5), class: 'bar ' + cls(j), 'data-key': spec.keys[j], 'data-value': v }));
        base += v;
      });
      root.append(g);
    });
    lines.forEach((pts, j) => {
      let run = [];
      for (const q of pts.concat([null])) {
        if (q) { run.push(q); continue; }
        if (run.length > 1) {
          root.insertBefore(svg('polyline', { points: run.map((r) => r.join(',')).join(' '), class: 'series ' + cls(j) }), root.querySelector('g.bucket'));
        }
        run = [];
      }
    });
    const legend = el('ul', undefined, 'legend');
    spec.keys.forEach((k, j) => {
      const li = el('li');
      li.append(el('span', '', 'swatch ' + cls(j)), document.createTextNode(k));
      legend.append(li);
    });
    const details = el('details');
    details.open = !!wasOpen;
    details.append(el('summary', 'data table'));
    const tbox = el('div');
    const head = ['when'].concat(spec.keys);
    if (spec.total) head.push('total');
    table(tbox, head, spec.points.map((p) => {
      const row = [p.when].concat(p.values.map((v) => v === null || v === undefined ? '-' : spec.fmt(v)));
      if (spec.total) row.push(spec.total(p));
      return row;
    }), 'no data');
    details.append(tbox);
    const parts = [root, legend, details];
    if (spec.empty) parts.unshift(el('p', spec.empty, 'empty'));
    box.replaceChildren(...parts);
  }

  function renderCharts(c) {
    const errs = Object.entries(c.errors || {}).map(([k, v]) => 'could not read ' + k + ': ' + v);
    document.getElementById('err-charts').textContent = errs.join('; ');
    document.getElementById('charts-note').textContent = c.note || '';
    const byWord = { repo: 'repository', trigger: 'trigger', model: 'model' }[c.by] || c.by;
    const spendTotal = c.spendPerDay.reduce((a, d) => a + d.micros, 0);
    draw('chart-spend', {
      keys: c.keys, yTitle: 'dollars', xTitle: 'day (UTC), by ' + byWord, fmt: money, tick: moneyTick,
      points: c.spendPerDay.map((d) => ({ when: day(d.start), label: shortDay(d.start), values: d.parts, micros: d.micros })),
      total: (p) => 'total ' + money(p.micros),
      empty: spendTotal ? '' : 'no spend recorded in these days',
    });
    const outcomeClass = { completed: 'o-completed', policy: 'o-policy', failed: 'o-failed' };
    draw('chart-runs', {
      keys: c.outcomes, classes: c.outcomes.map((o, i) => outcomeClass[o] || 's' + (i % 9)),
      yTitle: 'runs', xTitle: 'hour (UTC)', fmt: count, minTop: 4,
      points: c.runsPerHour.map((h) => ({ when: hour(h.start), label: shortHour(h.start), values: h.parts, runs: h.runs })),
      total: (p) => p.runs + ' runs',
    });
    draw('chart-wait', {
      keys: ['p50', 'p90'], line: true, yTitle: 'queue wait', xTitle: 'hour (UTC)', fmt: duration,
      points: c.queueWait.map((h) => ({ when: hour(h.start), label: shortHour(h.start),
        values: h.runs ? [h.p50Ms, h.p90Ms] : [null, null], runs: h.runs })),
      total: (p) => p.runs + ' runs',
    });
    document.getElementById('queue-depth').textContent = c.queueDepth === null || c.queueDepth === undefined
      ? 'waiting now: unknown' : 'waiting now: ' + c.queueDepth + (c.queueDepth === 1 ? ' job' : ' jobs');
    document.getElementById('queue-depth').dataset.value = c.queueDepth === null ? '' : c.queueDepth;
    draw('chart-cost', {
      keys: ['p90 per run'], classes: ['s1'], yTitle: 'dollars per run', xTitle: 'day (UTC)', fmt: money, tick: moneyTick,
      points: c.costPerDay.map((d) => ({ when: day(d.start), label: shortDay(d.start),
        values: [d.runs ? d.p90Micros : null], runs: d.runs })),
      total: (p) => p.runs + ' runs',
    });
    draw('chart-merged', {
      keys: ['merged'], classes: ['o-completed'], yTitle: 'share merged', xTitle: 'day (UTC)', fmt: pct,
      points: c.mergedPerDay.map((d) => ({ when: day(d.start), label: shortDay(d.start),
        values: [d.pullRequests ? d.merged / d.pullRequests : null], d: d })),
      total: (p) => p.d.merged + ' of ' + p.d.pullRequests + ' pull requests merged, ' + p.d.closed + ' closed',
      empty: c.joined ? '' : 'what became of pull requests is not known here: the dashboard was started without the pull request outcomes',
    });
    document.body.dataset.chartsLoaded = String(Number(document.body.dataset.chartsLoaded || 0) + 1);
  }

  function renderCapacity(r) {
    document.getElementById('err-capacity').textContent = '';
    const drain = r.waiting === 0 ? 'nothing waits'
      : r.drainMs === null ? 'no run ended in the last ' + duration(r.windowMs) + ': no drain estimate'
        : 'drains in about ' + duration(r.drainMs);
    const summary = document.getElementById('capacity-summary');
    summary.textContent = 'fleet: ' + r.slots + ' slots, ' + r.busy + ' busy (' + pct(r.busyShare) + '), ' +
      r.waiting + ' waiting, ' + r.delayed + ' delayed; ' + r.finished + ' runs ended in the last ' +
      duration(r.windowMs) + ' (' + r.perHour.toFixed(1) + ' an hour); ' + drain +
      (r.unattributed ? '; ' + r.unattributed + ' held by no live host' : '') + ' · runs read from ' + r.runs;
    summary.dataset.slots = r.slots;
    summary.dataset.busy = r.busy;
    summary.dataset.waiting = r.waiting;
    summary.dataset.drainMs = r.drainMs === null ? '' : r.drainMs;
    table('capacity-hosts', ['host', 'slots', 'busy', 'busy share', 'waiting on its queue', 'runs ended (window)', 'drain'],
      r.hosts.map((h) => [h.name + (h.untrusted ? ' (untrusted)' : ''), h.slots || '-', h.busy, pct(h.busyShare),
        h.waiting, h.finished, h.waiting === 0 ? '-' : h.drainMs === null ? 'no rate' : duration(h.drainMs)]),
      'no live hosts');
    table('capacity-queues', ['queue', 'waiting', 'delayed', 'active', 'paused'],
      r.queues.map((q) => [q.queue, q.waiting, q.delayed, q.active, q.paused ? 'yes' : 'no']), 'no queues');
    document.body.dataset.capacityLoaded = '1';
  }

  async function read(url) {
    const r = await fetch(url, { cache: 'no-store', headers: { Accept: 'application/json' } });
    const body = await r.json().catch(() => ({ message: 'HTTP ' + r.status }));
    if (!r.ok) throw new Error(body.message || 'HTTP ' + r.status);
    return body;
  }

  const by = document.getElementById('chart-by');
  let chartsTimer = null;
  async function loadCharts() {
    clearTimeout(chartsTimer);
    try {
      renderCharts(await read('api/charts?by=' + encodeURIComponent(by.value)));
    } catch (e) {
      document.getElementById('err-charts').textContent = 'could not read the charts: ' + e.message;
    } finally {
      chartsTimer = setTimeout(loadCharts, chartsMs);
    }
  }

  async function loadCapacity() {
    try {
      renderCapacity(await read('api/capacity'));
    } catch (e) {
      document.getElementById('err-capacity').textContent = 'could not read the capacity: ' + e.message;
    } finally {
      setTimeout(loadCapacity, capacityMs);
    }
  }

  if (by) {
    by.addEventListener('change', loadCharts);
    loadCharts();
  }
  if (document.getElementById('capacity-summary')) loadCapacity();
})();
