// Enqueue jobs for workers in any language, then wait for their outcomes.
//
//   DATABASE_URL=postgresql://... node call.mjs NAME QUEUE KEY PAYLOAD_JSON [KEY PAYLOAD_JSON ...]
//
// Prints one JSON line per job: {"key", "id", "outcome", "state", "result", "last_error"}.

import { connect, enqueue, outcome } from "./sqljobs.mjs";

const [name, queue, ...rest] = process.argv.slice(2);
if (!name || !queue || rest.length === 0 || rest.length % 2 !== 0) {
  console.error("usage: node call.mjs NAME QUEUE KEY PAYLOAD_JSON [KEY PAYLOAD_JSON ...]");
  process.exit(2);
}
const pool = connect();
try {
  const enqueued = [];
  for (let i = 0; i < rest.length; i += 2) {
    const job = await enqueue(pool, name, rest[i], JSON.parse(rest[i + 1]), { queue });
    enqueued.push({ key: rest[i], ...job });
  }
  for (const job of enqueued) {
    const done = await outcome(pool, job.id, 60000);
    console.log(JSON.stringify({ ...job, ...done }));
  }
} finally {
  await pool.end();
}
