/*
 * pg-boss (npm `pg-boss`) through its public API, following the driver protocol of
 * _common.py (the shared Node code is _common.cjs): new PgBoss({ connectionString }),
 * start() installs its schema (untimed) and runs its maintenance in-process;
 * createQueue(name) (required since pg-boss 10); send(name, data) is the one-job call
 * (enqueue_single, latency); insert([{ name, data }]) its batch API (enqueue_bulk, the
 * drain pre-fill, the sustained producer).
 *
 * The worker: pg-boss has no LISTEN/NOTIFY wake-up; each work() subscription polls,
 * fetches up to batchSize jobs, hands them to the handler as an array and completes the
 * batch in one query when the handler resolves, then waits out its polling interval.
 * Its defaults (one job per fetch, a poll every 2 s) would drain 0.5 jobs/s, so the
 * driver uses its documented knobs: --concurrency work() subscriptions, each with
 * batchSize 50 and pollingIntervalSeconds 0.5 (the minimum it accepts); the no-op
 * handler records every job of its batch.
 *
 * A job is settled when pgboss.job holds it as completed (pg-boss keeps completed jobs
 * there until it archives them, 12 h by default).
 */
"use strict";

const {
  Recorder, drain, emit, enqueueBulk, enqueueSingle, latency, parseArgs, sustained, usage,
} = require("./_common.cjs");
const PgBoss = require("pg-boss");
const VERSION = require("pg-boss/package.json").version;

const QUEUE = "bench_noop";
const COUNT = "select count(*) from pgboss.job";
const SETTLED = "select count(*) from pgboss.job where state = 'completed'";
const BATCH_SIZE = 50;
const POLLING_INTERVAL_S = 0.5;

const A = parseArgs(process.argv.slice(2));
const REC = new Recorder();

function fail(error) {
  process.stderr.write(`pgboss_driver.cjs: ${error && error.stack ? error.stack : error}\n`);
  process.exit(1);
}

async function main() {
  if (!["enqueue_single", "enqueue_bulk", "drain", "latency", "sustained"].includes(A.workload)) {
    usage(`the ${A.workload} workload is not measured: pg-boss has no durable steps or such limits`);
  }
  const boss = new PgBoss({ connectionString: A.dsn });
  boss.on("error", (e) => process.stderr.write(`[pg-boss] error: ${e && e.stack ? e.stack : e}\n`));
  await boss.start();
  await boss.createQueue(QUEUE);

  const handler = async (jobs) => {
    for (const job of jobs) REC.ran(job.data && job.data.t ? job.data.t : null);
  };
  const startWorker = () => Promise.all(Array.from({ length: A.concurrency }, () => boss.work(
    QUEUE, { batchSize: BATCH_SIZE, pollingIntervalSeconds: POLLING_INTERVAL_S }, handler)));
  const stopWorker = async (handle) => {
    await handle;
    await boss.offWork(QUEUE);
  };
  const jobsOf = (n, data) => Array.from({ length: n }, () => ({ name: QUEUE, data }));

  let result;
  try {
    if (A.workload === "enqueue_single") {
      result = await enqueueSingle(A, () => boss.send(QUEUE, {}), COUNT);
    } else if (A.workload === "enqueue_bulk") {
      const prepare = (indexes) => jobsOf(indexes.length, {});
      result = await enqueueBulk(A, prepare, (jobs) => boss.insert(jobs), COUNT);
    } else if (A.workload === "drain") {
      for (let i = 0; i < A.jobs; i += 1000) {
        await boss.insert(jobsOf(Math.min(1000, A.jobs - i), {}));
      }
      result = await drain(A, REC, startWorker, stopWorker, SETTLED);
    } else if (A.workload === "latency") {
      result = await latency(A, REC, startWorker, stopWorker, (i, t) => boss.send(QUEUE, { t }));
    } else {
      result = await sustained(A, REC, startWorker, stopWorker,
        (n, t) => boss.insert(jobsOf(n, { t })));
    }
  } finally {
    await boss.stop({ graceful: true, wait: true, timeout: 5000 });
  }
  emit(result, VERSION);
}

main().then(
  () => process.exit(0),
  (e) => fail(e),
);
