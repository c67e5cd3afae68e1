// Helpers both dashboard pages load before their own script. Every value
// is data and is set with textContent, never parsed as markup.
'use strict';
window.pidash = (function () {
  function el(tag, text, cls) {
    const e = document.createElement(tag);
    if (text !== undefined && text !== null) e.textContent = String(text);
    if (cls) e.className = cls;
    return e;
  }

  // table renders rows (arrays of strings or nodes) under headers into box
  // (an element, or the id of one), or a line saying there is nothing.
  function table(box, headers, rows, empty) {
    if (typeof box === 'string') box = document.getElementById(box);
    if (rows.length === 0) {
      box.replaceChildren(el('p', empty, 'empty'));
      return;
    }
    const t = el('table');
    const head = el('tr');
    for (const h of headers) head.appendChild(el('th', h));
    t.appendChild(el('thead')).appendChild(head);
    const body = t.appendChild(el('tbody'));
    for (const row of rows) {
      const tr = body.appendChild(el('tr'));
      for (const cell of row) {
        const td = tr.appendChild(el('td'));
        if (cell instanceof Node) td.appendChild(cell);
        else td.textContent = cell === null || cell === undefined ? '' : String(cell);
      }
    }
    box.replaceChildren(t);
  }

  // jobLink is a link to a job's page.
  function jobLink(jobId) {
    const a = el('a', jobId);
    a.href = 'job?id=' + encodeURIComponent(jobId);
    return a;
  }

  // urlLink links url when it is an http(s) URL, and is its text otherwise
  // (an allow-list of schemes: nothing else is ever made clickable).
  function urlLink(url, text) {
    if (!url) return '';
    let u = null;
    try { u = new URL(url); } catch (e) { return String(url); }
    if (u.protocol !== 'https:' && u.protocol !== 'http:') return String(url);
    const a = el('a', text || url);
    a.href = u.href;
    a.rel = 'noopener noreferrer';
    return a;
  }

  return Object.freeze({ el, table, jobLink, urlLink });
})();
