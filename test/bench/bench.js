// The BullMQ side of bench/cmd/queuebench, with BullMQ's default options
// (jobs are kept once completed, as ours are). One script for each BullMQ
// major: queuebench runs it with NODE_PATH set to the node_modules of
// bullmq/ (BullMQ 5) or bullmq6/ (BullMQ 6), each pinned by its
// package-lock.json.
//
//   NODE_PATH=bullmq6/node_modules node bench.js throughput <redis://host:port/db> '{"queue":"bench","jobs":20000,"concurrency":16}'
//     addBulk()s `jobs` no-op jobs (in chunks of 1000), then times a Worker
//     of `concurrency` from run() to its last "completed" event.
//     Prints {"jobs", "enqueueMs", "drainMs", "infoBefore", "infoAfter"}, the
//     last two the server's INFO commandstats and cpu around the drain.
//
//   node bench.js latency <redis://host:port/db> '{"queue":"bench","jobs":500,"spacingMs":2,"concurrency":16}'
//     Starts a Worker, lets it go idle, then a producer in a worker thread
//     (its own event loop, as a separate producer process would have) adds
//     `jobs` jobs one at a time `spacingMs` apart, each carrying its enqueue
//     time; the processor records its start minus that time.
//     Prints {"latenciesUs": [...]}. Both threads read process.hrtime, the
//     machine's monotonic clock.
//
// Exits 1 with the error on stderr.
'use strict';

const { Queue, Worker } = require('bullmq');
const threads = require('node:worker_threads');

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

const nowUs = () => Number(process.hrtime.bigint() / 1000n);
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

function positive(args, name) {
  const v = args[name];
  if (!Number.isInteger(v) || v <= 0) throw new Error(`${name} must be a positive integer, got ${JSON.stringify(v)}`);
  return v;
}

// counter resolves its promise when done() was called `count` times, and rejects
// after timeoutMs or on fail().
function counter(count, timeoutMs) {
  let n = 0;
  let resolve;
  let reject;
  const promise = new Promise((res, rej) => {
    resolve = res;
    reject = rej;
  });
  const timer = setTimeout(() => reject(new Error(`only ${n} of ${count} jobs finished within ${timeoutMs} ms`)), timeoutMs);
  return {
    promise,
    done() {
      n += 1;
      if (n === count) {
        clearTimeout(timer);
        resolve();
      }
    },
    fail(err) {
      clearTimeout(timer);
      reject(err);
    },
  };
}

async function throughput(url, args) {
  const jobs = positive(args, 'jobs');
  const concurrency = positive(args, 'concurrency');
  const conn = connection(url);
  const queue = new Queue(args.queue, { connection: conn });
  await queue.waitUntilReady();
  const t0 = performance.now();
  for (let i = 0; i < jobs; i += 1000) {
    const batch = [];
    for (let j = i; j < Math.min(i + 1000, jobs); j++) batch.push({ name: 'noop', data: { i: j } });
    await queue.addBulk(batch);
  }
  const enqueueMs = performance.now() - t0;

  const finished = counter(jobs, args.timeoutMs || 120000);
  let end = 0;
  const worker = new Worker(args.queue, async () => {}, { connection: conn, concurrency, autorun: false });
  worker.on('completed', () => {
    end = performance.now();
    finished.done();
  });
  worker.on('failed', (job, err) => finished.fail(new Error(`job ${job && job.id} failed: ${err && err.message}`)));
  worker.on('error', (err) => finished.fail(err));
  await worker.waitUntilReady();
  // The raw client: Queue.client in BullMQ 5, the backend's in 6.
  const admin = await (queue.getBackend ? queue.getBackend().client : queue.client);
  const infoBefore = await admin.info('commandstats');
  const cpuBefore = await admin.info('cpu');
  const start = performance.now();
  const running = worker.run();
  let infoAfter;
  let cpuAfter;
  try {
    await finished.promise;
    infoAfter = await admin.info('commandstats');
    cpuAfter = await admin.info('cpu');
  } finally {
    await worker.close();
    await running.catch(() => {});
    await queue.close();
  }
  return { jobs, enqueueMs, drainMs: end - start, infoBefore: infoBefore + cpuBefore, infoAfter: infoAfter + cpuAfter };
}

async function latency(url, args) {
  const jobs = positive(args, 'jobs');
  const concurrency = positive(args, 'concurrency');
  const conn = connection(url);
  const lat = [];
  const finished = counter(jobs, args.timeoutMs || 60000);
  const worker = new Worker(
    args.queue,
    async (job) => {
      lat.push(nowUs() - job.data.t);
      finished.done();
    },
    { connection: conn, concurrency },
  );
  worker.on('failed', (job, err) => finished.fail(new Error(`job ${job && job.id} failed: ${err && err.message}`)));
  worker.on('error', (err) => finished.fail(err));
  await worker.waitUntilReady();
  await sleep(300); // idle: asleep on the marker
  const producer = new threads.Worker(__filename, { workerData: { url, args } });
  const produced = new Promise((resolve, reject) => {
    producer.on('error', reject);
    producer.on('exit', (code) => (code === 0 ? resolve() : reject(new Error(`producer exited ${code}`))));
  });
  try {
    await Promise.all([produced, finished.promise]);
  } finally {
    await producer.terminate();
    await worker.close();
  }
  return { latenciesUs: lat };
}

// produce runs in the producer thread.
async function produce({ url, args }) {
  const queue = new Queue(args.queue, { connection: connection(url) });
  await queue.waitUntilReady();
  for (let i = 0; i < args.jobs; i++) {
    await queue.add('noop', { i, t: nowUs() });
    await sleep(args.spacingMs);
  }
  await queue.close();
}

async function main() {
  const [mode, url, raw] = process.argv.slice(2);
  const args = JSON.parse(raw || '{}');
  if (typeof args.queue !== 'string' || args.queue === '') throw new Error('queue must be a non-empty string');
  const modes = { throughput, latency };
  if (!modes[mode]) throw new Error(`unknown mode ${JSON.stringify(mode)}; use throughput or latency`);
  const out = await modes[mode](url, args);
  process.stdout.write(JSON.stringify(out) + '\n');
}

if (threads.isMainThread) {
  main().then(
    () => process.exit(0),
    (err) => {
      process.stderr.write(`${(err && err.stack) || err}\n`);
      process.exit(1);
    },
  );
} else {
  produce(threads.workerData).catch((err) => {
    process.stderr.write(`producer: ${(err && err.stack) || err}\n`);
    process.exit(1);
  });
}
