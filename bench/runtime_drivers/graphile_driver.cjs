/*
 * Graphile Worker (npm `graphile-worker`) through its public API, following the driver
 * protocol of _common.py (same options, same timed parts, same RESULT lines):
 * runMigrations() installs the schema (untimed); makeWorkerUtils() gives addJob (one
 * call per job: enqueue_single, latency) and addJobs (the batch API: enqueue_bulk, the
 * drain pre-fill, the sustained producer); run() is the in-process runner with
 * concurrency = --concurrency and a taskList of one no-op task that records its start
 * (latency and sustained payloads carry t = enqueue time in seconds). Signal handling is
 * off (noHandleSignals), and a logger that drops info and debug keeps per-job logging
 * out of the timings.
 *
 * --variant default: Graphile Worker's defaults (no local queue, one complete/fail
 *   query per job, maxPoolSize 10, LISTEN/NOTIFY on, poll 2 s).
 * --variant batched: its documented batching features on, as on the docs' Performance
 *   page for its throughput figures: preset.worker.localQueue = { size: 500 },
 *   completeJobBatchDelay = 0, failJobBatchDelay = 0 (everything else default).
 *
 * A job is settled when Graphile has deleted it from graphile_worker._private_jobs (it
 * deletes completed jobs; a failed one would stay there with its error).
 *
 * The protocol, options, clocks and workloads are _common.cjs's.
 */
"use strict";

const {
  Recorder, drain, emit, enqueueBulk, enqueueSingle, latency, parseArgs, sustained, usage,
} = require("./_common.cjs");
const { Logger, makeWorkerUtils, run, runMigrations } = require("graphile-worker");
const VERSION = require("graphile-worker/package.json").version;

const TASK = "bench_noop";
const JOBS_TABLE = "graphile_worker._private_jobs";
const COUNT = `select count(*) from ${JOBS_TABLE}`;

// ---------------------------------------------------------------- Graphile Worker

const A = parseArgs(process.argv.slice(2));
const REC = new Recorder();

// errors and warnings to stderr; info and debug (per-job lines among them) dropped
const LOGGER = new Logger((scope) => (level, message) => {
  if (level === "error" || level === "warning") {
    process.stderr.write(`[graphile ${scope.label || ""}] ${level}: ${message}\n`);
  }
});

const VARIANTS = {
  default: {},
  batched: {
    worker: {
      localQueue: { size: 500 },
      completeJobBatchDelay: 0,
      failJobBatchDelay: 0,
    },
  },
};

function variantPreset() {
  return VARIANTS[A.variant || "default"];
}

const TASKS = {
  [TASK]: async (payload) => {
    REC.ran(payload && payload.t ? payload.t : null);
  },
};

/** The runner, starting; like asyncio.create_task, not awaited here. */
function startWorker() {
  const runner = run({
    connectionString: A.dsn,
    concurrency: A.concurrency,
    taskList: TASKS,
    logger: LOGGER,
    noHandleSignals: true,
    preset: variantPreset(),
  });
  runner.then(
    (r) => r.promise.catch((e) => fail(e)),
    (e) => fail(e),
  );
  return runner;
}

async function stopWorker(handle) {
  const runner = await handle;
  await runner.stop();
  await runner.promise;
}

function fail(error) {
  process.stderr.write(`graphile_driver.cjs: ${error && error.stack ? error.stack : error}\n`);
  process.exit(1);
}

async function main() {
  if (A.workload === "steps") {
    usage("the steps workload is not supported: Graphile Worker has no durable steps");
  }
  if (!((A.variant || "default") in VARIANTS)) {
    usage(`unknown --variant ${JSON.stringify(A.variant)} (choose from ${Object.keys(VARIANTS).join(", ")})`);
  }
  await runMigrations({ connectionString: A.dsn, logger: LOGGER });
  const utils = await makeWorkerUtils({ connectionString: A.dsn, logger: LOGGER });
  let result;
  try {
    if (A.workload === "enqueue_single") {
      result = await enqueueSingle(A, (i) => utils.addJob(TASK, {}), COUNT);
    } else if (A.workload === "enqueue_bulk") {
      const prepare = (indexes) => indexes.map(() => ({ identifier: TASK, payload: {} }));
      result = await enqueueBulk(A, prepare, (specs) => utils.addJobs(specs), COUNT);
    } else if (A.workload === "drain") {
      for (let i = 0; i < A.jobs; i += 1000) {
        const n = Math.min(1000, A.jobs - i);
        await utils.addJobs(Array.from({ length: n }, () => ({ identifier: TASK, payload: {} })));
      }
      result = await drain(A, REC, startWorker, stopWorker, `select ${A.jobs} - count(*) from ${JOBS_TABLE}`);
    } else if (A.workload === "latency") {
      result = await latency(A, REC, startWorker, stopWorker, (i, t) => utils.addJob(TASK, { t }));
    } else {
      const enqueueBatch = (n, t) => utils.addJobs(Array.from({ length: n }, () => ({ identifier: TASK, payload: { t } })));
      result = await sustained(A, REC, startWorker, stopWorker, enqueueBatch);
    }
  } finally {
    await utils.release();
  }
  emit(result, VERSION);
}

main().then(
  () => process.exit(0),
  (e) => fail(e),
);
