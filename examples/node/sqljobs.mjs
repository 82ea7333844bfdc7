// A sqljobs client for Node.js in plain SQL: enqueue, and a worker that claims in
// batches, heartbeats its leases, settles in batches and stops gracefully.
//
// Everything here is a call to a public function of the `jobs` schema
// (docs/reference/sql.md); nothing reads or writes the tables. The same loop in Go,
// Java or Rust is a transcription: see docs/howto-other-languages.md.
//
// Things a driver makes you think about, and what this file does about them:
//   - bigint arrives as a string in node-postgres: ids and claim tokens stay strings
//     and go back as they came ($1::bigint[]).
//   - arrays are passed as JS arrays with an explicit cast ($3::jsonb[] takes JSON
//     texts, null for none).
//   - a worker registers with jobs.worker_heartbeat (else its jobs show as unserved).

import pg from "pg";

const WAKE_CHANNEL = "jobs_wake";

// One job; answers {id, outcome} where outcome is "created" or "deduped".
export async function enqueue(db, name, key, payload = {}, options = {}) {
  const { rows } = await db.query(
    "select id, outcome from jobs.enqueue($1, $2, $3::jsonb, $4::jsonb)",
    [name, key, JSON.stringify(payload), JSON.stringify(options)],
  );
  return rows[0];
}

// The job's final outcome, waiting for it: {state, result, last_error}.
// LISTEN first, then read (jobs.watch_outcome marks the job watched), so no
// settlement can fall between the two; re-read on a notification or every second.
export async function outcome(pool, id, timeoutMs = 30000) {
  const client = await pool.connect();
  const final = new Set(["succeeded", "failed", "dead", "cancelled"]);
  let wake = () => {};
  // jobs_settled names settled jobs by their watch tokens (never ids), "*" for "too many"
  let token = null;
  const onNotify = (msg) => {
    if (msg.payload === "*" || msg.payload.split(",").includes(token)) wake();
  };
  try {
    client.on("notification", onNotify);
    await client.query("listen jobs_settled");
    ({ rows: [{ token }] } = await client.query("select jobs.watch_token($1) as token", [id]));
    const deadline = Date.now() + timeoutMs;
    for (;;) {
      const { rows } = await client.query(
        "select state::text as state, result, last_error from jobs.watch_outcome($1)", [id]);
      if (rows.length === 0) throw new Error(`no job ${id}`);
      if (final.has(rows[0].state)) return rows[0];
      if (Date.now() > deadline) throw new Error(`job ${id} is still ${rows[0].state}`);
      await new Promise((resolve) => {
        wake = resolve;
        setTimeout(resolve, 1000);
      });
    }
  } finally {
    client.off("notification", onNotify);
    await client.query("unlisten jobs_settled").catch(() => {});
    client.release();
  }
}

export async function emitEvent(db, name, payload = {}) {
  await db.query("select jobs.emit_event($1, $2::jsonb)", [name, JSON.stringify(payload)]);
}

// A job a handler refuses for good: settled with mode "fail" (no retry).
export class Terminal extends Error {}

export class Worker {
  // handlers: {jobName: async (payload, job) => result}; result must be JSON.
  constructor(pool, { id, queues, handlers, concurrency = 10, leaseS = 30, pollMs = 1000,
                      drainMs = 10000, log = console.error }) {
    this.pool = pool;
    this.id = id;
    this.queues = queues;
    this.handlers = handlers;
    this.names = Object.keys(handlers);
    this.concurrency = concurrency;
    this.leaseS = leaseS;
    this.pollMs = pollMs;
    this.drainMs = drainMs;
    this.log = log;
    this.held = new Map(); // id -> {job, done}
    this.stopping = false;
    this.counts = { succeeded: 0, failed: 0, retried: 0, lost: 0 };
    this._wake = null;
  }

  async run() {
    await this.register();
    const heartbeats = setInterval(() => this.heartbeat().catch((e) => this.log(e)),
                                   (this.leaseS * 1000) / 3);
    const listener = await this.listen();
    try {
      while (!this.stopping) {
        const free = this.concurrency - this.held.size;
        const jobs = free > 0 ? await this.claim(free) : [];
        for (const job of jobs) this.start(job);
        if (jobs.length === 0 || jobs.length < free) await this.idle();
      }
      await this.drain();
    } finally {
      clearInterval(heartbeats);
      if (listener) {
        listener.removeAllListeners("notification");
        listener.release();
      }
      await this.pool.query("select jobs.worker_stop($1)", [this.id]);
    }
  }

  stop() {
    this.stopping = true;
    if (this._wake) this._wake();
  }

  async register() {
    await this.pool.query(
      "select jobs.worker_heartbeat($1, $2::text[], $3::text[], $4, $5, $6, $7, $8::jsonb)",
      [this.id, this.queues, this.names, this.concurrency, this.leaseS * 2,
       (await import("node:os")).hostname(), process.pid,
       JSON.stringify({ runtime: `node ${process.version}` })],
    );
  }

  // Wake on NOTIFY jobs_wake instead of waiting for the poll. Its payload is a queue's
  // token (jobs.wake_tokens), never the queue's name.
  async listen() {
    const client = await this.pool.connect();
    const { rows } = await client.query("select token from jobs.wake_tokens($1::text[])",
                                        [this.queues]);
    const tokens = new Set(rows.map((row) => row.token));
    client.on("notification", (msg) => {
      if (tokens.has(msg.payload) && this._wake) this._wake();
    });
    await client.query(`listen ${WAKE_CHANNEL}`);
    return client;
  }

  idle() {
    return new Promise((resolve) => {
      const timer = setTimeout(done, this.pollMs);
      const self = this;
      function done() {
        clearTimeout(timer);
        self._wake = null;
        resolve();
      }
      this._wake = done;
    });
  }

  async claim(n) {
    const { rows } = await this.pool.query(
      `select id, name, payload, attempt, max_attempts, claim
         from jobs.claim($1::text[], $2, $3, $4, $5::jsonb)`,
      [this.queues, this.id, n, this.leaseS, JSON.stringify({ names: this.names })],
    );
    return rows;
  }

  start(job) {
    const entry = { job };
    this.held.set(job.id, entry);
    entry.done = this.execute(job).finally(() => {
      this.held.delete(job.id);
      if (this._wake) this._wake();
    });
  }

  async execute(job) {
    let settle;
    try {
      const result = await this.handlers[job.name](job.payload, job);
      settle = { ack: true, result: result === undefined ? null : result };
    } catch (error) {
      settle = {
        ack: false,
        mode: error instanceof Terminal ? "fail" : "retry",
        error: { kind: error instanceof Terminal ? "terminal" : "error",
                 type: error.constructor.name, message: String(error.message ?? error) },
      };
    }
    await this.settle(job, settle);
  }

  // One job per call keeps this example short; a busy consumer collects the outcomes
  // that are ready and sends them together (ack_many/nack_many take arrays).
  async settle(job, s) {
    if (s.ack) {
      const { rows } = await this.pool.query(
        "select id, ok from jobs.ack_many($1::bigint[], $2::bigint[], $3::jsonb[])",
        [[job.id], [job.claim], [JSON.stringify(s.result)]],
      );
      this.count(rows[0].ok ? "succeeded" : "lost");
      return;
    }
    const { rows } = await this.pool.query(
      `select id, ok, state::text as state
         from jobs.nack_many($1::bigint[], $2::bigint[], $3::jsonb[], $4::text[])`,
      [[job.id], [job.claim], [JSON.stringify(s.error)], [s.mode]],
    );
    const r = rows[0];
    this.count(!r.ok ? "lost" : r.state === "ready" ? "retried" : "failed");
  }

  count(label) {
    this.counts[label] = (this.counts[label] ?? 0) + 1;
  }

  // Extend every held lease; a job answered false is no longer ours (its lease lapsed
  // and another worker may run it): its outcome will be refused by the fence.
  async heartbeat() {
    if (this.held.size === 0) return;
    const jobs = [...this.held.values()].map((e) => e.job);
    const { rows } = await this.pool.query(
      "select id, ok from jobs.heartbeat_many($1::bigint[], $2::bigint[], $3)",
      [jobs.map((j) => j.id), jobs.map((j) => j.claim), this.leaseS],
    );
    for (const r of rows) if (!r.ok) this.log(`lost the lease of job ${r.id}`);
    await this.register();
  }

  // Stop claiming, give running handlers drainMs to finish; hand back the rest with
  // mode "interrupt" (not an attempt; the job keeps its place in line).
  async drain() {
    const running = [...this.held.values()];
    const timeout = new Promise((resolve) => setTimeout(resolve, this.drainMs, "timeout"));
    const finished = Promise.all(running.map((e) => e.done));
    if ((await Promise.race([finished, timeout])) === "timeout") {
      const left = [...this.held.values()].map((e) => e.job);
      if (left.length > 0) {
        await this.pool.query(
          "select id from jobs.nack_many($1::bigint[], $2::bigint[], null, $3::text[])",
          [left.map((j) => j.id), left.map((j) => j.claim), left.map(() => "interrupt")],
        );
      }
    }
  }
}

export function connect() {
  // node-postgres reads PGHOST, PGPORT, PGUSER, PGDATABASE, PGPASSWORD; or DATABASE_URL
  return new pg.Pool(process.env.DATABASE_URL ? { connectionString: process.env.DATABASE_URL }
                                              : {});
}
