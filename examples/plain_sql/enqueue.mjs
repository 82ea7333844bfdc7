// A producer in another language: Node.js with the `pg` package calls the same SQL
// functions the Python client does.
//
//   npm install                        # in examples/plain_sql/
//   DATABASE_URL=postgresql://postgres@127.0.0.1:5432/app node enqueue.mjs 42 ada@example.com
//
// Without DATABASE_URL, `pg` reads the usual PGHOST, PGPORT, PGUSER, PGDATABASE and
// PGPASSWORD variables. The job and the service's own write commit together.
import pg from "pg";

const [signupId = "42", email = "ada@example.com"] = process.argv.slice(2);
const client = new pg.Client(
  process.env.DATABASE_URL ? { connectionString: process.env.DATABASE_URL } : {},
);

await client.connect();
try {
  await client.query("begin");
  // ... the service's own writes go here, in the same transaction ...
  const { rows } = await client.query(
    "select id, outcome from jobs.enqueue($1, $2, $3::jsonb, $4::jsonb)",
    [
      "examples.send_welcome",
      `signup:${signupId}:welcome`, // the idempotency key: a retry answers 'deduped'
      JSON.stringify({ signup_id: Number(signupId), email }),
      JSON.stringify({ queue: "mail", max_attempts: 5 }),
    ],
  );
  await client.query("commit");
  console.log(JSON.stringify(rows[0]));
} catch (error) {
  await client.query("rollback");
  // Coded errors carry SQLSTATE class SJ, e.g. SJ002 payload_too_large.
  console.error(`enqueue failed: ${error.code ?? ""} ${error.message}`);
  process.exitCode = 1;
} finally {
  await client.end();
}
