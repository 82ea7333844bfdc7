// A sqljobs worker in Node.js: runs the jobs named below from queue "node" until
// SIGTERM or SIGINT, then drains and deregisters.
//
//   DATABASE_URL=postgresql://... node worker.mjs [worker-id]
//
// Prints one JSON line when it stops: {"stopped": id, "counts": {...}}.

import { connect, emitEvent, Terminal, Worker } from "./sqljobs.mjs";

const pool = connect();
const id = process.argv[2] ?? `node-${process.pid}`;

const handlers = {
  // {a, b} -> {sum}; an event tells whoever waits for it.
  "node.add": async ({ a, b }, job) => {
    if (typeof a !== "number" || typeof b !== "number") {
      throw new Terminal("a and b must be numbers");
    }
    await emitEvent(pool, "node.added", { job: job.id, sum: a + b });
    return { sum: a + b, by: "node", attempt: job.attempt };
  },
  // Fails its first attempt: shows a nack with the default retry policy.
  "node.flaky": async ({ n }, job) => {
    if (job.attempt === 1) throw new Error(`attempt ${job.attempt} of ${n} fails`);
    return { n, attempts: job.attempt };
  },
};

const worker = new Worker(pool, { id, queues: ["node"], handlers, concurrency: 4,
                                  leaseS: 10, pollMs: 500 });
for (const signal of ["SIGTERM", "SIGINT"]) process.on(signal, () => worker.stop());
console.error(`node worker ${id} started: queues=node names=${worker.names.join(",")}`);
await worker.run();
console.log(JSON.stringify({ stopped: id, counts: worker.counts }));
await pool.end();
