/*
 * What the Node drivers share (graphile_driver.cjs, pgboss_driver.cjs): the protocol
 * of _common.py, its options, clocks and workloads, in JavaScript. Only `pg` is
 * required (every Node peer depends on it; NODE_PATH points at the peer's
 * node_modules).
 *
 * Clocks: "window" is wall-clock Date.now()/1000; durations use performance.now(); the
 * enqueue time in payloads and the handler's start use performance.timeOrigin +
 * performance.now() (wall-clock with sub-millisecond resolution, as time.time() is).
 */
"use strict";

const path = require("path");
const { performance } = require("perf_hooks");
const { Client } = require("pg");

const WORKLOADS = ["enqueue_single", "enqueue_bulk", "drain", "drain_limited", "latency", "steps", "sustained"];
const DRIVER = path.basename(process.argv[1] || "driver");

// ---------------------------------------------------------------- options (_common.args)

function parseArgs(argv) {
  const spec = {
    workload: { type: "choice", def: undefined },
    dsn: { type: "str", def: undefined },
    jobs: { type: "int", def: 0 },
    batch: { type: "int", def: 1000 },
    concurrency: { type: "int", def: 10 },
    "interval-ms": { type: "float", def: 10.0 },
    steps: { type: "int", def: 100 },
    rate: { type: "float", def: 200.0 },
    seconds: { type: "float", def: 600.0 },
    variant: { type: "str", def: "" },
    timeout: { type: "float", def: 300.0 },
    window: { type: "float", def: 10.0 },
    "burst-at": { type: "float", def: -1.0 },
    "burst-seconds": { type: "float", def: 30.0 },
    "burst-factor": { type: "float", def: 10.0 },
  };
  const out = {};
  for (const [k, s] of Object.entries(spec)) out[k] = s.def;
  for (let i = 0; i < argv.length; i++) {
    let key = argv[i];
    let value;
    if (!key.startsWith("--")) usage(`unexpected argument: ${key}`);
    key = key.slice(2);
    const eq = key.indexOf("=");
    if (eq >= 0) {
      value = key.slice(eq + 1);
      key = key.slice(0, eq);
    } else {
      if (i + 1 >= argv.length) usage(`--${key} expects a value`);
      value = argv[++i];
    }
    const s = spec[key];
    if (!s) usage(`unknown option --${key}`);
    if (s.type === "int") {
      if (!/^[+-]?\d+$/.test(value)) usage(`--${key}: invalid int value: '${value}'`);
      out[key] = parseInt(value, 10);
    } else if (s.type === "float") {
      const v = Number(value);
      if (value.trim() === "" || Number.isNaN(v)) usage(`--${key}: invalid float value: '${value}'`);
      out[key] = v;
    } else if (s.type === "choice") {
      if (!WORKLOADS.includes(value)) {
        usage(`--${key}: invalid choice: '${value}' (choose from ${WORKLOADS.join(", ")})`);
      }
      out[key] = value;
    } else {
      out[key] = value;
    }
  }
  if (out.workload === undefined || out.dsn === undefined) {
    usage("the following arguments are required: --workload, --dsn");
  }
  return {
    workload: out.workload, dsn: out.dsn, jobs: out.jobs, batch: out.batch,
    concurrency: out.concurrency, intervalMs: out["interval-ms"], steps: out.steps,
    rate: out.rate, seconds: out.seconds, variant: out.variant, timeout: out.timeout,
    window: out.window, burstAt: out["burst-at"], burstSeconds: out["burst-seconds"],
    burstFactor: out["burst-factor"],
  };
}

function usage(message) {
  process.stderr.write(`${DRIVER}: error: ${message}\n`);
  process.exit(2);
}

// ---------------------------------------------------------------- clocks and helpers

const wallNow = () => Date.now() / 1000; // the RESULT windows
const hiNow = () => (performance.timeOrigin + performance.now()) / 1000; // lags
const perf = () => performance.now() / 1000; // durations

const sleep = (seconds) => new Promise((resolve) => setTimeout(resolve, Math.max(0, seconds * 1000)));

/** `promise`, or a rejection after `seconds` (asyncio.wait_for). */
function waitFor(promise, seconds, what) {
  let timer;
  const timeout = new Promise((_, reject) => {
    timer = setTimeout(() => reject(new Error(`timed out after ${seconds} s: ${what}`)), seconds * 1000);
  });
  return Promise.race([promise, timeout]).finally(() => clearTimeout(timer));
}

/** Python's round(): halves go to the even neighbour. */
function pyRound(x) {
  const f = Math.floor(x);
  const d = x - f;
  if (d > 0.5) return f + 1;
  if (d < 0.5) return f;
  return f % 2 === 0 ? f : f + 1;
}

/** What the no-op handler reports (as _common.Recorder). */
class Recorder {
  constructor() {
    this.expect(0);
  }

  expect(n) {
    this.started = 0;
    this.target = n;
    this.lagsMs = [];
    this.ranAt = [];
    this.reached = new Promise((resolve) => {
      this._resolve = resolve;
    });
    if (n <= 0) this._resolve();
  }

  ran(enqueuedAt) {
    const now = hiNow();
    if (enqueuedAt) {
      this.lagsMs.push((now - enqueuedAt) * 1000.0);
      this.ranAt.push(now);
    }
    this.started += 1;
    if (this.started >= this.target) this._resolve();
  }
}

async function withClient(dsn, fn) {
  const client = new Client({ connectionString: dsn });
  await client.connect();
  try {
    return await fn(client);
  } finally {
    await client.end();
  }
}

async function scalar(dsn, query) {
  return withClient(dsn, async (client) => {
    const { rows } = await client.query({ text: query, rowMode: "array" });
    return rows.length ? Number(rows[0][0]) : 0;
  });
}

async function analyze(dsn) {
  await withClient(dsn, (client) => client.query("analyze"));
}

async function verifyCount(dsn, query, expected, what) {
  const got = await scalar(dsn, query);
  if (got !== expected) {
    throw new Error(`${what}: the database holds ${got} jobs; expected ${expected}`);
  }
}

// Python's statistics.quantiles(data, n=100, method="inclusive"); data sorted
function quantiles100(sorted) {
  const n = 100;
  const m = sorted.length - 1;
  const out = [];
  for (let i = 1; i < n; i++) {
    const j = Math.floor((i * m) / n);
    const delta = i * m - j * n;
    out.push((sorted[j] * (n - delta) + sorted[Math.min(j + 1, m)] * delta) / n);
  }
  return out;
}

function summary(lags) {
  const sorted = [...lags].sort((x, y) => x - y);
  const q = quantiles100(sorted);
  const mean = sorted.reduce((s, x) => s + x, 0) / sorted.length;
  return { p50_ms: q[49], p95_ms: q[94], p99_ms: q[98], max_ms: sorted[sorted.length - 1], mean_ms: mean };
}

// ---------------------------------------------------------------- workloads (_common)

async function enqueueSingle(a, enqueue, countQuery) {
  await enqueue(-1); // warm-up: connection open, statements prepared
  const t0 = wallNow();
  const p0 = perf();
  for (let i = 0; i < a.jobs; i++) {
    await enqueue(i);
  }
  const seconds = perf() - p0;
  const t1 = wallNow();
  await verifyCount(a.dsn, countQuery, a.jobs + 1, "enqueue_single");
  return { workload: "enqueue_single", jobs: a.jobs, seconds, jobs_per_s: a.jobs / seconds, window: [t0, t1] };
}

async function enqueueBulk(a, prepare, enqueueBatch, countQuery) {
  await enqueueBatch(prepare([-1])); // warm-up
  const batches = [];
  for (let i = 0; i < a.jobs; i += a.batch) {
    const indexes = [];
    for (let k = i; k < Math.min(i + a.batch, a.jobs); k++) indexes.push(k);
    batches.push(prepare(indexes));
  }
  const t0 = wallNow();
  const p0 = perf();
  for (const batch of batches) {
    await enqueueBatch(batch);
  }
  const seconds = perf() - p0;
  const t1 = wallNow();
  await verifyCount(a.dsn, countQuery, a.jobs + 1, "enqueue_bulk");
  return {
    workload: "enqueue_bulk", jobs: a.jobs, batch: a.batch, seconds,
    jobs_per_s: a.jobs / seconds, window: [t0, t1],
  };
}

/** Poll `query` (a count of settled jobs) every 2 ms until it reaches n; answers perf()
 * at that moment. */
async function waitSettled(dsn, query, n, timeout) {
  const deadline = perf() + timeout;
  return withClient(dsn, async (client) => {
    const statement = { name: "bench_settled", text: query, rowMode: "array" };
    for (;;) {
      const { rows } = await client.query(statement);
      const got = rows.length ? Number(rows[0][0]) : 0;
      if (got >= n) return perf();
      if (perf() > deadline) throw new Error(`only ${got}/${n} settled`);
      await sleep(0.002);
    }
  });
}

async function drain(a, rec, startWorker, stopWorker, settledQuery) {
  await analyze(a.dsn);
  rec.expect(a.jobs);
  const t0 = wallNow();
  const p0 = perf();
  const handle = startWorker();
  await waitFor(rec.reached, a.timeout, "drain handlers");
  const handlersDone = perf();
  const p1 = await waitSettled(a.dsn, settledQuery, a.jobs, a.timeout);
  const t1 = wallNow();
  await stopWorker(handle);
  const settled = await scalar(a.dsn, settledQuery);
  if (settled !== a.jobs || rec.started !== a.jobs) {
    throw new Error(`drain: ${settled} settled, ${rec.started} handler runs; expected ${a.jobs}`);
  }
  return {
    workload: "drain", jobs: a.jobs, seconds: p1 - p0, jobs_per_s: a.jobs / (p1 - p0),
    handlers_seconds: handlersDone - p0, settled, window: [t0, t1],
  };
}

async function latency(a, rec, startWorker, stopWorker, enqueue) {
  rec.expect(1);
  const handle = startWorker();
  await enqueue(-1, 0.0); // warm-up: the worker has claimed and run once
  await waitFor(rec.reached, 30, "latency warm-up job");
  await sleep(0.5); // idle
  rec.expect(a.jobs);
  const t0 = wallNow();
  const start = perf();
  for (let i = 0; i < a.jobs; i++) {
    const delay = start + (i * a.intervalMs) / 1000.0 - perf();
    if (delay > 0) await sleep(delay);
    await enqueue(i, hiNow());
  }
  await waitFor(rec.reached, a.timeout, "latency jobs");
  const t1 = wallNow();
  await stopWorker(handle);
  if (rec.lagsMs.length !== a.jobs) {
    throw new Error(`latency: ${rec.lagsMs.length} lags recorded, expected ${a.jobs}`);
  }
  return { workload: "latency", jobs: a.jobs, ...summary(rec.lagsMs), window: [t0, t1] };
}

/** Jobs offered by `t` seconds into a sustained run: --rate a second, times
 * --burst-factor from --burst-at for --burst-seconds (as _common.offered). */
function offered(a, t) {
  let jobs = a.rate * t;
  if (a.burstAt >= 0) {
    const inBurst = Math.min(Math.max(t - a.burstAt, 0), a.burstSeconds);
    jobs += (a.burstFactor - 1) * a.rate * inBurst;
  }
  return jobs;
}

/** Per --window seconds from h0 to h1: handler starts (jobs), jobs enqueued, and the
 * p50/p99 pickup lag of the jobs started in it (null when none). */
function windows(a, rec, sends, h0, h1) {
  const series = [];
  for (let b = 0; b <= Math.floor((h1 - h0) / a.window); b++) {
    const lo = h0 + a.window * b;
    const hi = h0 + a.window * (b + 1);
    const lags = [];
    for (let k = 0; k < rec.lagsMs.length; k++) {
      if (lo <= rec.ranAt[k] && rec.ranAt[k] < hi) lags.push(rec.lagsMs[k]);
    }
    let enqueued = 0;
    for (const [at, n] of sends) if (lo <= at && at < hi) enqueued += n;
    let p50 = null;
    let p99 = null;
    if (lags.length === 1) {
      p50 = p99 = lags[0];
    } else if (lags.length >= 2) {
      const q = quantiles100(lags.sort((x, y) => x - y));
      p50 = q[49];
      p99 = q[98];
    }
    series.push({ t: a.window * b, jobs: lags.length, enqueued, p50_ms: p50, p99_ms: p99 });
  }
  return series;
}

async function sustained(a, rec, startWorker, stopWorker, enqueueBatch) {
  const total = pyRound(offered(a, a.seconds));
  rec.expect(total);
  const handle = startWorker();
  const t0 = wallNow();
  const h0 = hiNow(); // the series' buckets: on the clock the handler records with
  const start = perf();
  const sends = [];
  let sent = 0;
  let tick = 0;
  while (sent < total) {
    const delay = start + tick * 0.1 - perf();
    if (delay > 0) await sleep(delay);
    tick += 1;
    const n = Math.min(total - sent, pyRound(offered(a, tick * 0.1)) - sent);
    if (n > 0) {
      const at = hiNow();
      await enqueueBatch(n, at);
      sends.push([at, n]);
      sent += n;
    }
  }
  await waitFor(rec.reached, a.timeout, "sustained jobs");
  const t1 = wallNow();
  const h1 = hiNow();
  await stopWorker(handle);
  const result = {
    workload: "sustained", jobs: total, rate: a.rate, seconds: h1 - h0,
    ...summary(rec.lagsMs), series: windows(a, rec, sends, h0, h1), window: [t0, t1],
  };
  if (a.burstAt >= 0) {
    result.burst = { at: a.burstAt, seconds: a.burstSeconds, factor: a.burstFactor };
  }
  return result;
}

function emit(result, version) {
  result.version = version;
  process.stdout.write(`RESULT ${JSON.stringify(result)}\n`);
}

module.exports = {
  parseArgs, usage, wallNow, hiNow, perf, sleep, waitFor, pyRound, Recorder, withClient,
  scalar, analyze, verifyCount, quantiles100, summary, enqueueSingle, enqueueBulk,
  waitSettled, drain, latency, offered, sustained, emit,
};
