// Points Bull Board (@bull-board/api) at a fleet's queues, read-only, and
// prints what its /api/queues route lists: for each queue, its counts, whether it is paused, and the ids of its jobs
// in each state. No UI server runs: a small server adapter keeps the routes
// createBullBoard hands it, and the script calls the route's handler as the
// UI's HTTP request would.
//
// The same script serves every BullMQ major: the Go tests run it with
// NODE_PATH set to the node_modules of bullboard/ (over BullMQ 5) or
// bullboard6/ (over BullMQ 6), each pinned by its package-lock.json.
//
//   NODE_PATH=bullboard6/node_modules node bullboard.js <redis://host:port/db> <queue>...
//
// Prints one JSON document on stdout; exits 1 with the error on stderr.
'use strict';

const { Queue } = require('bullmq');
const { createBullBoard } = require('@bull-board/api');
const { BullMQAdapter } = require('@bull-board/api/bullMQAdapter');

const STATES = ['waiting', 'paused', 'delayed', 'prioritized', 'active', 'completed', 'failed'];

function connection(rawURL) {
  const u = new URL(rawURL);
  const opts = {
    host: u.hostname,
    port: Number(u.port || 6379),
    db: Number((u.pathname || '/0').slice(1) || '0'),
    maxRetriesPerRequest: null,
  };
  if (u.password) opts.password = decodeURIComponent(u.password);
  if (u.username) opts.username = decodeURIComponent(u.username);
  return opts;
}

// captureAdapter is the least a server adapter must do for createBullBoard:
// accept its setters and keep the queues and the API routes.
function captureAdapter() {
  const a = { queues: null, routes: [], uiConfig: {} };
  const self = () => a;
  Object.assign(a, {
    setQueues(q) { a.queues = q; return a; },
    setViewsPath: self, setStaticPath: self, setEntryRoute: self, setErrorHandler: self,
    setUIConfig(c) { a.uiConfig = c; return a; },
    setApiRoutes(r) { a.routes = r; return a; },
  });
  return a;
}

function route(adapter, method, path) {
  const r = adapter.routes.find((x) => x.method === method && x.route === path);
  if (!r) throw new Error(`bull board has no ${method} ${path} route`);
  return r.handler;
}

async function main() {
  const [rawURL, ...names] = process.argv.slice(2);
  if (!rawURL || names.length === 0) throw new Error('usage: node bullboard.js <redis-url> <queue>...');
  const conn = connection(rawURL);
  const queues = names.map((n) => new Queue(n, { connection: conn, prefix: 'bull' }));
  const adapter = captureAdapter();
  createBullBoard({
    queues: queues.map((q) => new BullMQAdapter(q, { readOnlyMode: true })),
    serverAdapter: adapter,
  });
  const list = route(adapter, 'get', '/api/queues');
  const out = {};
  try {
    for (const name of names) {
      const view = { jobs: {} };
      for (const status of STATES) {
        const res = await list({
          queues: adapter.queues, uiConfig: adapter.uiConfig,
          query: { activeQueue: name, status, page: '1', jobsPerPage: '100' },
        });
        if (res.status && res.status >= 400) throw new Error(`/api/queues ${status}: ${JSON.stringify(res.body)}`);
        const q = res.body.queues.find((x) => x.name === name);
        if (!q) throw new Error(`bull board does not list queue ${name}`);
        view.counts = q.counts;
        view.isPaused = q.isPaused;
        view.readOnlyMode = q.readOnlyMode;
        view.jobs[status] = q.jobs.map((j) => ({ id: j.id, name: j.name, failedReason: j.failedReason || '' }));
      }
      out[name] = view;
    }
  } finally {
    await Promise.all(queues.map((q) => q.close()));
  }
  process.stdout.write(JSON.stringify(out));
}

main().catch((err) => {
  process.stderr.write(String((err && err.stack) || err) + '\n');
  process.exit(1);
});
