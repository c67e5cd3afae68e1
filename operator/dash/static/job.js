// The job page: one job (?id=...) with its record, what holds it and its
// transcript, refreshed while it runs; without an id, the waiting and
// delayed jobs of every queue. Every value is set with textContent.
'use strict';
(function () {
  const { el, table, jobLink, urlLink } = window.pidash;
  const refreshMs = Number(document.body.dataset.refreshMs) || 3000;
  const id = new URLSearchParams(location.search).get('id');

  function message(text) {
    document.getElementById('message').textContent = text;
  }

  function stamp() {
    document.getElementById('updated').textContent = 'updated ' + new Date().toLocaleTimeString();
  }

  async function read(url) {
    const r = await fetch(url, { headers: { Accept: 'application/json' } });
    const body = await r.json();
    if (!r.ok) throw new Error(body.message || r.status);
    return body;
  }

  // outcomeText says what became of a record's pull request, as the
  // receiver's store knows it (joined by the server): "merged, +1 human
  // push"; "" when it is not known.
  function outcomeText(r) {
    const o = r.pullRequest;
    if (!o || !o.state) return '';
    const n = Number(o.humanCommits) || 0;
    return n > 0 ? o.state + ', +' + n + (n === 1 ? ' human push' : ' human pushes') : o.state;
  }

  // prCell is a record's pull request: its link, then what became of it.
  function prCell(url, outcome) {
    if (!url) return '';
    const span = el('span');
    span.appendChild(urlLink(url));
    if (outcome) span.appendChild(el('span', ' (' + outcome + ')', 'pr-outcome'));
    return span;
  }

  function renderJob(j) {
    document.getElementById('title').textContent = 'job ' + j.jobId;
    const recs = j.records || [];
    const last = recs.filter(r => r.pullRequestUrl).pop();
    const pr = last ? last.pullRequestUrl : '';
    const status = recs.map(r => r.statusCommentUrl).filter(Boolean).pop();
    const facts = [
      ['state', j.found ? j.state : 'on no queue'],
      ['pull request', last ? prCell(pr, outcomeText(last)) : ''],
      ['status comment', status ? urlLink(status) : ''],
      ['queue', j.queue || ''],
      ['host', j.host || ''],
      ['attempt', j.attempt ? j.attempt + (j.attempts ? ' of ' + j.attempts : '') : ''],
      ['scope', j.scope || ''],
    ];
    table(document.getElementById('job'), ['', ''], facts, '');
    table(document.getElementById('findings'), ['code', 'what'],
      (j.findings || []).map(f => [f.code, f.words]), 'nothing holds it');
    table(document.getElementById('records'), ['attempt', 'host', 'outcome', 'reason', 'ended', 'dollars', 'pull request'],
      recs.map(r => [r.attempt, r.host, r.outcome, r.reason, r.endedAt,
        r.spend ? '$' + Number(r.spend.dollars).toFixed(4) : '', prCell(r.pullRequestUrl, outcomeText(r))]), 'no run recorded');
    let title = 'Transcript';
    if (j.transcriptAttempt) title += ' of attempt ' + j.transcriptAttempt + (j.transcriptFrom === 'live' ? ' (live)' : '');
    if (j.running) title += ' · running, refreshed every ' + Math.round(refreshMs / 1000) + 's';
    document.getElementById('transcript-title').textContent = title;
    const lines = j.lines || [];
    const pre = document.getElementById('transcript');
    const cut = j.linesCut ? '[' + j.linesCut + ' earlier lines not shown]\n' : '';
    pre.textContent = lines.length ? cut + lines.join('\n') : 'no transcript here: it is kept on the host that ran the job (pi-dispatch logs ' + j.jobId + ')';
  }

  function renderQueued(lists) {
    const rows = [];
    for (const q of lists) {
      for (const w of q.waiting) rows.push([q.queue, 'waiting', jobLink(w), '']);
      for (const d of q.delayed) rows.push([q.queue, 'delayed', jobLink(d.jobId), d.until]);
    }
    table(document.getElementById('queued'), ['queue', 'list', 'job', 'due'], rows, 'no job is waiting or delayed');
  }

  async function tick() {
    try {
      if (id) {
        const j = await read('api/job?id=' + encodeURIComponent(id));
        renderJob(j);
        document.getElementById('job-section').hidden = false;
        message('');
        stamp();
        if (j.running || (j.findings || []).length) setTimeout(tick, refreshMs);
      } else {
        renderQueued(await read('api/queued'));
        document.getElementById('queued-section').hidden = false;
        message('');
        stamp();
        setTimeout(tick, refreshMs);
      }
    } catch (e) {
      message('could not read: ' + e.message);
      setTimeout(tick, refreshMs);
    }
  }
  tick();
})();
