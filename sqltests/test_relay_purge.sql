-- jobs.purge_outbox deletes published rows past their retention, at most p_max per
-- call, oldest first, and answers what a second call would still delete. Unpublished
-- rows are never purged.
begin;
select plan(6);

set local jobs.notify = off;
set local jobs.fake_now = '2030-01-01 00:00:00+00';
select lives_ok($$ select jobs.stage_many((select jsonb_agg(jsonb_build_object(
                     'name', 'rp.job', 'key', 'k' || i)) from generate_series(1, 5) i)) $$,
                'setup: five staged rows');
select is((select held from jobs.relay(3, 'R', 30)), 3, 'setup: three claimed');
select is((select published from jobs.relay(0, 'R', 30)), 3, 'setup: three published at 00:00');

set local jobs.fake_now = '2030-01-01 00:00:59+00';
select results_eq($$ select purged, remaining from jobs.purge_outbox(60, 10) $$,
                  $$ values (0, 0::bigint) $$, 'within the retention nothing goes');
set local jobs.fake_now = '2030-01-01 00:01:01+00';
select results_eq($$ select purged, remaining from jobs.purge_outbox(60, 2) $$,
                  $$ values (2, 1::bigint) $$, 'past it: at most max, and what remains');
select results_eq($$ select (select purged from jobs.purge_outbox(60, 10)),
                            (select count(*)::int from jobs.outbox where published_at is null) $$,
                  $$ values (1, 2) $$, 'the rest goes; the two unpublished rows stay');

select * from finish();
rollback;
