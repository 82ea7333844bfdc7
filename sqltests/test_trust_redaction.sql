-- Trust boundary: the outcome a producer awaits is redacted (sql/40_settle.sql,
-- jobs.watch_outcome reads jobs.job_view). A job whose type marks payload paths
-- sensitive, and whose result and error repeat those secrets, reads "[redacted]" for
-- them through watch_outcome exactly as through jobs.job_view. Logged in as a producer
-- (and a reader, for the view).
begin;
select plan(9);

create role tbr_producer login in role sqljobs_producer;
create role tbr_reader login in role sqljobs_reader;
set local jobs.notify = off;
set local jobs.fake_now = '2030-01-01 00:00:00+00';
select lives_ok($$ select jobs.job_type_put('tbr.pay', '{"queue": "q_tbr", "sensitive": ["card.number", "cvv"]}') $$,
                'setup: a job type whose card.number and cvv are sensitive');
do $$ begin
  perform pg_catalog.set_config('tbr.id', (select e.id from jobs.enqueue('tbr.pay', 'k',
    '{"card": {"number": "4111111111111111"}, "cvv": "737", "amount": 5}', '{"queue": "q_tbr"}') e)::text, true);
  -- attempt 1 fails with an error that quotes the card; attempt 2 succeeds with a result
  -- that repeats both secrets
  perform jobs.nack(c.id, c.claim, '{"kind": "declined", "message": "card 4111111111111111 declined"}', 'retry', 0)
     from jobs.claim(array['q_tbr'], 'w', 1, 30) c;
  perform jobs.ack(c.id, c.claim, '{"charged": "4111111111111111", "check": {"cvv": "737"}, "amount": 5,
                                    "note": "charged card 4111111111111111"}')
     from jobs.claim(array['q_tbr'], 'w', 1, 30) c;
end $$;
-- (settings read first, in a scalar subquery: distributed on Citus, a query over the jobs
-- runs on a shard, where the setting does not exist)
select is((select state::text from jobs.job where id = (select current_setting('tbr.id')::bigint)),
          'succeeded',
          'setup: the job succeeded; its stored result holds the secrets');
set local jobs.fake_now = '';

set local session authorization tbr_producer;
create temp table seen as select * from jobs.watch_outcome(current_setting('tbr.id')::bigint);
grant select on seen to public;  -- (the reader compares below)
select is((select result from seen),
          '{"charged": "[redacted]", "check": {"cvv": "[redacted]"}, "amount": 5, "note": "charged card [redacted]"}'::jsonb,
          'producer: watch_outcome answers the result with each secret "[redacted]" (values and inside text)');
select is((select last_error->>'message' from seen), 'card [redacted] declined',
          'producer: and the last error (of the earlier attempt) redacted too');
select ok((select pg_catalog.strpos(pg_catalog.to_jsonb(s)::text, '4111111111111111') = 0
                  and pg_catalog.strpos(pg_catalog.to_jsonb(s)::text, '737') = 0 from seen s),
          'producer: no secret appears anywhere in what watch_outcome answers');
select throws_ok($$ select 1 from jobs.job_view $$, '42501', null, 'producer: (it reads no view)');

set local session authorization tbr_reader;
select results_eq($$ select v.id, v.state, v.result, v.last_error from jobs.job_view v
                      where v.id = (select current_setting('tbr.id')::bigint) $$,
                  $$ select s.id, s.state, s.result, s.last_error from seen s $$,
                  'reader: jobs.job_view shows the same redacted result and error');
select is((select v.payload from jobs.job_view v
            where v.id = (select current_setting('tbr.id')::bigint)),
          '{"card": {"number": "[redacted]"}, "cvv": "[redacted]", "amount": 5}'::jsonb,
          'reader: and the payload with its sensitive paths "[redacted]"');
reset session authorization;
select ok((select pg_catalog.strpos(j.result::text, '4111111111111111') > 0 from jobs.job j
            where j.id = (select current_setting('tbr.id')::bigint)),
          'the stored result itself is untouched (redaction is on read)');

select * from finish();
rollback;
