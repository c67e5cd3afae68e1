// The dashboard page: reads api/state every few seconds and renders it.
// Every value is data and is set with textContent, never parsed as markup.
'use strict';
(function () {
  const { el, table, jobLink, urlLink } = window.pidash;
  const refreshMs = Number(document.body.dataset.refreshMs) || 3000;
  let timer = null;

  function age(ms) {
    if (ms === null || ms === undefined) return '?';
    const s = Math.round(ms / 1000);
    if (s < 120) return s + 's';
    if (s < 7200) return Math.round(s / 60) + 'm';
    if (s < 172800) return Math.round(s / 3600) + 'h';
    return Math.round(s / 86400) + 'd';
  }

  function dollars(d) {
    return d === null || d === undefined ? '-' : '$' + Number(d).toFixed(4);
  }

  function ofCap(n, cap) {
    return cap ? n + ' of ' + cap : n + ' (no cap)';
  }

  function cancelButton(jobId) {
    const b = el('button', 'Cancel');
    b.type = 'button';
    b.className = 'cancel';
    b.dataset.jobId = jobId;
    b.addEventListener('click', () =>
      act('api/cancel', { jobId: jobId }, 'Cancel job ' + JSON.stringify(jobId) + '? Its container is stopped.'));
    return b;
  }

  function render(s) {
    const fleet = document.getElementById('fleet');
    fleet.textContent = s.fleet ? 'fleet: ' + s.fleet + (s.pauseFlag ? ' (pause flag set)' : '') : 'fleet: unknown';
    fleet.className = 'fleet ' + (s.fleet === 'paused' ? 'paused' : s.fleet === 'partly paused' ? 'partly' : '');
    for (const sec of ['hosts', 'queues', 'held', 'running', 'runs', 'starts', 'dollars']) {
      const msg = s.errors && s.errors[sec];
      document.getElementById('err-' + sec).textContent = msg ? 'could not read ' + sec + ': ' + msg : '';
    }
    table('hosts', ['name', 'last beat', 'routes', 'capabilities', 'concurrency', 'version', 'running jobs'],
      s.hosts.map((h) => [h.name, age(h.ageMs) + ' ago', h.routes ? 'yes' : 'no', h.caps || '-',
        h.concurrency || '-', h.version || '-', h.running.length ? h.running.join(', ') : '-']),
      'no live hosts');
    table('queues', ['queue', 'paused', 'waiting', 'delayed', 'prioritized', 'active', 'completed', 'refused', 'cancelled', 'failed'],
      s.queues.map((q) => [q.queue, q.pausedState ? 'yes' : 'no', q.waiting + q.paused, q.delayed, q.prioritized,
        q.active, q.completed, q.refused, q.cancelled, q.failed]),
      'no queues');
    const st = s.starts;
    table('starts', ['window', 'container starts'], st ? [['today (UTC)', ofCap(st.day, st.dailyCap)],
      ['this week (UTC, from Monday)', ofCap(st.week, st.weeklyCap)]] : [], 'container starts unknown');
    if (s.dollarsOff) {
      document.getElementById('dollars').replaceChildren(el('p', 'dollar windows: not configured', 'empty'));
    } else {
      table('dollars', ['dollar window', 'used', 'cap'],
        s.dollars.map((d) => [d.window, dollars(d.used), d.cap === null ? 'none' : dollars(d.cap)]), 'no dollar windows');
    }
    const runHead = ['job id', 'queue', 'host', 'running for', 'kind', 'target'];
    if (s.actions) runHead.push('');
    table('running', runHead, s.running.map((r) => {
      const row = [jobLink(r.jobId), r.queue, r.host || '?', age(r.ageMs), r.kind || '-', r.target || '-'];
      if (s.actions) row.push(cancelButton(r.jobId));
      return row;
    }), 'no running jobs');
    table('held', ['job id', 'held for', 'checks'], s.held.map((h) => [jobLink(h.jobId), age(h.ageMs), h.checks]), 'no held jobs');
    document.getElementById('runs-note').textContent = s.runsNote ? 'run mirror: ' + s.runsNote : '';
    const forgeLinks = (r) => {
      const box = el('span');
      const pr = urlLink(r.pullRequestUrl, 'pull request');
      const st = urlLink(r.statusCommentUrl, 'status');
      if (pr) box.append(pr);
      if (pr && st) box.append(' · ');
      if (st) box.append(st);
      return pr || st ? box : '-';
    };
    table('runs', ['ended', 'job id', 'host', 'kind', 'outcome', 'reason', 'attempt', 'took', 'cost', 'forge'],
      s.runs.map((r) => [new Date(r.endedAt).toISOString().replace('T', ' ').slice(0, 19), jobLink(r.jobId), r.host,
        r.kind, el('span', r.outcome, 'outcome-' + r.outcome), r.reason, r.attempt, age(r.durationMs),
        dollars(r.dollars) + (r.estimated ? ' (estimated)' : ''), forgeLinks(r)]),
      'no runs recorded');
    document.getElementById('updated').textContent = 'updated ' + new Date(s.now).toLocaleTimeString();
    document.body.dataset.loaded = '1';
  }

  async function refresh() {
    clearTimeout(timer);
    try {
      const r = await fetch('api/state', { cache: 'no-store', headers: { Accept: 'application/json' } });
      if (!r.ok) throw new Error('HTTP ' + r.status);
      render(await r.json());
    } catch (e) {
      document.getElementById('updated').textContent = 'could not read the state: ' + e.message;
    } finally {
      timer = setTimeout(refresh, refreshMs);
    }
  }

  async function act(path, body, question) {
    if (!window.confirm(question)) return;
    const msg = document.getElementById('message');
    msg.textContent = 'working…';
    try {
      const r = await fetch(path, {
        method: 'POST', cache: 'no-store',
        headers: { 'Content-Type': 'application/json' },
        body: JSON.stringify(body),
      });
      const reply = await r.json().catch(() => ({ message: 'HTTP ' + r.status }));
      msg.textContent = reply.message || ('HTTP ' + r.status);
    } catch (e) {
      msg.textContent = 'failed: ' + e.message;
    }
    refresh();
  }

  const pause = document.getElementById('pause');
  if (pause) {
    pause.addEventListener('click', () => act('api/pause', {}, 'Pause the whole fleet? No worker takes a new job until resume.'));
  }
  const resume = document.getElementById('resume');
  if (resume) {
    resume.addEventListener('click', () => act('api/resume', {}, 'Resume the whole fleet?'));
  }
  refresh();
})();
