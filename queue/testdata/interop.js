// Drives the real bullmq package against a Valkey database, for the Go
// interop tests in queue/. The same script serves every BullMQ major: the
// Go tests run it with NODE_PATH set to the node_modules of bullmq/ (BullMQ
// 5, cron-parser 4) or bullmq6/ (BullMQ 6, cron-parser 5), each pinned by
// its package-lock.json.
//
//   NODE_PATH=bullmq6/node_modules node interop.js <scenario> <redis://host:port/db> '<json args>'
//
// Prints one JSON document on stdout; exits 1 with the error on stderr.
'use strict';

const { Queue, Worker } = require('bullmq');
const cronParser = require('cron-parser');

// cronNextAfter is cron-parser's next run after ms: parseExpression in
// cron-parser 4, CronExpressionParser.parse in 5.
function cronNextAfter(pattern, tz, ms) {
  const opts = { currentDate: new Date(ms), tz };
  if (cronParser.CronExpressionParser) return cronParser.CronExpressionParser.parse(pattern, opts).next().getTime();
  return cronParser.parseExpression(pattern, opts).next().getTime();
}

// rawClient is the queue's ioredis client: Queue.client in BullMQ 5, the
// backend's in 6.
function rawClient(q) {
  return q.getBackend ? q.getBackend().client : q.client;
}

// moveStalled runs a Worker's stalled check script once.
function moveStalled(worker) {
  return worker.getBackend ? worker.getBackend().moveStalledJobsToWait() : worker.scripts.moveStalledJobsToWait();
}

function connection(rawURL) {
  const u = new URL(rawURL);
  const db = Number((u.pathname || '/0').slice(1) || '0');
  const opts = {
    host: u.hostname,
    port: Number(u.port || 6379),
    db,
    maxRetriesPerRequest: null,
  };
  if (u.password) opts.password = decodeURIComponent(u.password);
  if (u.username) opts.username = decodeURIComponent(u.username);
  return opts;
}

function jobView(job, state) {
  if (!job) return null;
  return {
    id: job.id,
    name: job.name,
    data: job.data,
    opts: job.opts,
    returnvalue: job.returnvalue,
    failedReason: job.failedReason,
    stacktrace: job.stacktrace,
    attemptsMade: job.attemptsMade,
    timestamp: job.timestamp,
    processedOn: job.processedOn,
    finishedOn: job.finishedOn,
    delay: job.delay,
    repeatJobKey: job.repeatJobKey,
    state,
  };
}

// runWorker processes jobs with a BullMQ Worker until `count` jobs finished
// or `timeoutMs` passed, returning them in order.
async function runWorker(conn, args) {
  const done = [];
  let worker;
  await new Promise((resolve) => {
    const timer = setTimeout(resolve, args.timeoutMs || 5000);
    worker = new Worker(
      args.queue,
      async (job) => {
        if (args.fail) throw new Error(args.fail);
        return args.returnvalue === undefined ? { by: 'node' } : args.returnvalue;
      },
      { connection: conn, prefix: args.prefix || 'bull', drainDelay: 1, maxStalledCount: 0 },
    );
    const finished = (job) => {
      done.push(jobView(job));
      if (args.count && done.length >= args.count) {
        clearTimeout(timer);
        resolve();
      }
    };
    worker.on('completed', finished);
    worker.on('failed', finished);
    worker.on('error', () => {});
  });
  await worker.close();
  return { processed: done };
}

// waitingView lists a queue's waiting jobs as the keep-last scenarios
// compare them.
async function waitingView(q) {
  return (await q.getWaiting()).map((j) => ({
    id: j.id, name: j.name, data: j.data, deduplication: j.opts.deduplication || null,
  }));
}

// queueView is what BullMQ reports of a queue: its counts and its waiting
// jobs' ids in order (what Bull Board shows).
async function queueView(q) {
  const counts = await q.getJobCounts('waiting', 'active', 'paused', 'delayed', 'prioritized', 'completed', 'failed');
  return { counts, waiting: (await q.getWaiting()).map((j) => j.id) };
}

const scenarios = {
  async add(q, conn, args) {
    const job = await q.add(args.name || 'node-job', args.data === undefined ? {} : args.data, args.opts || {});
    return { id: job.id, timestamp: job.timestamp };
  },
  async get(q, conn, args) {
    const job = await q.getJob(args.id);
    if (!job) return null;
    return jobView(job, await job.getState());
  },
  async counts(q) {
    return q.getJobCounts('waiting', 'active', 'paused', 'delayed', 'prioritized', 'completed', 'failed');
  },
  async isPaused(q) {
    return { paused: await q.isPaused() };
  },
  async pause(q) {
    await q.pause();
    return { paused: await q.isPaused() };
  },
  async resume(q) {
    await q.resume();
    return { paused: await q.isPaused() };
  },
  async process(q, conn, args) {
    return runWorker(conn, args);
  },
  // stalledCheck runs BullMQ's own stalled check once (the script a Worker
  // runs every stalledInterval) and returns the ids it moved or failed.
  async stalledCheck(q, conn, args) {
    const worker = new Worker(args.queue, null, {
      connection: conn, prefix: args.prefix || 'bull', autorun: false, maxStalledCount: 0, stalledInterval: 1,
    });
    try {
      await worker.waitUntilReady();
      return { stalled: await moveStalled(worker) };
    } finally {
      await worker.close();
    }
  },
  // workers starts a BullMQ Worker named args.name on args.control (when
  // given), waits until that queue lists it, and returns the raw client
  // names getWorkers() lists for each of args.queues.
  async workers(q, conn, args) {
    const prefix = args.prefix || 'bull';
    let worker;
    if (args.control) {
      worker = new Worker(args.control, async () => ({}), {
        connection: conn, prefix, name: args.name, maxStalledCount: 0, drainDelay: 1,
      });
      worker.on('error', () => {});
      await worker.waitUntilReady();
    }
    const list = async (name) => {
      const other = new Queue(name, { connection: conn, prefix });
      try {
        return (await other.getWorkers()).map((w) => w.rawname).sort();
      } finally {
        await other.close();
      }
    };
    try {
      for (let i = 0; args.control && i < 100 && (await list(args.control)).length === 0; i++) {
        await new Promise((r) => setTimeout(r, 20));
      }
      const out = {};
      for (const name of args.queues) out[name] = await list(name);
      return out;
    } finally {
      if (worker) await worker.close();
    }
  },
  // cronNext asks cron-parser (the version BullMQ depends on) for the run
  // after each of args.after (millis) of each {pattern, tz} in args.cases,
  // as BullMQ's default repeat strategy does; null where it finds none.
  async cronNext(q, conn, args) {
    return args.cases.map((c) => args.after.map((ms) => {
      try {
        return cronNextAfter(c.pattern, c.tz, ms);
      } catch (e) {
        return null;
      }
    }));
  },
  // wake starts a BullMQ Worker (BullMQ's default drainDelay, so a worker
  // nobody wakes sleeps 5 s) on a paused queue, prints "ready" once it
  // waits, and resumes the queue itself when args.resumeBy is "node" (else
  // the Go test resumes it on reading "ready"). It returns the milliseconds
  // from "ready" to the first job going active and the jobs in the order
  // they ran, once args.count finished or args.timeoutMs passed.
  async wake(q, conn, args) {
    const done = [];
    let firstMs = null;
    let start = 0;
    let worker;
    await new Promise((resolve, reject) => {
      const timer = setTimeout(resolve, args.timeoutMs || 10000);
      worker = new Worker(args.queue, async () => ({ by: 'node' }), {
        connection: conn, prefix: args.prefix || 'bull', maxStalledCount: 0,
      });
      worker.on('active', () => {
        if (firstMs === null) firstMs = Date.now() - start;
      });
      worker.on('completed', (job) => {
        done.push(job.id);
        if (done.length >= args.count) {
          clearTimeout(timer);
          resolve();
        }
      });
      worker.on('error', () => {});
      worker.waitUntilReady()
        .then(() => new Promise((r) => setTimeout(r, 300)))
        .then(async () => {
          start = Date.now();
          process.stdout.write('ready\n');
          if (args.resumeBy === 'node') await q.resume();
        })
        .catch(reject);
    });
    await worker.close();
    return { firstMs, processed: done };
  },
  async waiting(q) {
    return waitingView(q);
  },
  // steps runs args.steps on the queue in order, in one process: {op:
  // "add", id, delay}, {op: "pause"}, {op: "resume"}, {op: "promote"} (a
  // worker's fetch, which promotes due delayed jobs, on a paused queue) and
  // {op: "view"}, whose counts and waiting ids are returned, one per view.
  async steps(q, conn, args) {
    const views = [];
    for (const s of args.steps) {
      if (s.op === 'add') await q.add('pi', {}, { jobId: s.id, delay: s.delay || 0 });
      else if (s.op === 'pause') await q.pause();
      else if (s.op === 'resume') await q.resume();
      else if (s.op === 'sleep') await new Promise((r) => setTimeout(r, s.ms));
      else if (s.op === 'promote') {
        const worker = new Worker(args.queue, null, { connection: conn, prefix: args.prefix || 'bull', autorun: false });
        try {
          await worker.getNextJob('tok', { block: false });
        } finally {
          await worker.close();
        }
      } else if (s.op === 'view') views.push(await queueView(q));
      else throw new Error(`steps: unknown op ${s.op}`);
    }
    return views;
  },
  async view(q) {
    return queueView(q);
  },
  // keepLastControl is the BullMQ-only control of deduplication's
  // keepLastIfActive mode: add, take, add twice more while active, then
  // finish the taken job (args.finish: "complete" or "fail").
  async keepLastControl(q, conn, args) {
    const prefix = args.prefix || 'bull';
    const deduplication = { id: args.dedupId, keepLastIfActive: true };
    const worker = new Worker(args.queue, null, { connection: conn, prefix, autorun: false, maxStalledCount: 0 });
    try {
      await q.add('job', { n: 1 }, { deduplication });
      const job = await worker.getNextJob('tok');
      for (const n of [2, 3]) await q.add('job', { n }, { deduplication });
      const before = await waitingView(q);
      if (args.finish === 'fail') await job.moveToFailed(new Error('boom'), 'tok', false);
      else await job.moveToCompleted({ ok: true }, 'tok', false);
      const client = await rawClient(q);
      const holder = await client.get(`${prefix}:${args.queue}:de:${args.dedupId}`);
      return { before, after: await waitingView(q), holder };
    } finally {
      await worker.close();
    }
  },
  async schedulers(q) {
    return q.getJobSchedulers(0, -1, true);
  },
  async upsertScheduler(q, conn, args) {
    const job = await q.upsertJobScheduler(args.id, args.repeat, args.template || {});
    return { id: job && job.id };
  },
};

async function main() {
  const [scenario, rawURL, rawArgs] = process.argv.slice(2);
  const run = scenarios[scenario];
  if (!run || !rawURL) {
    throw new Error(`usage: interop.js <${Object.keys(scenarios).join('|')}> <redis-url> [json]`);
  }
  const args = (rawArgs && JSON.parse(rawArgs)) || {};
  args.queue = args.queue || 'pi-jobs';
  const conn = connection(rawURL);
  const q = new Queue(args.queue, { connection: conn, prefix: args.prefix || 'bull' });
  try {
    const out = await run(q, conn, args);
    process.stdout.write(JSON.stringify(out === undefined ? null : out) + '\n');
  } finally {
    await q.close();
  }
}

main().then(
  () => process.exit(0),
  (err) => {
    process.stderr.write(String((err && err.stack) || err) + '\n');
    process.exit(1);
  },
);
