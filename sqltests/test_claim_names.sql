-- jobs.claim options {"names": [...]}: claims only those job names; others wait.
begin;
select plan(8);

set local jobs.fake_now = '2030-01-01 00:00:00+00';
select lives_ok($$ select * from jobs.enqueue_many('[
  {"name": "names.x", "key": "x1", "queue": "q_names", "priority": -5},
  {"name": "names.y", "key": "y1", "queue": "q_names"},
  {"name": "names.z", "key": "z1", "queue": "q_names"}
]') $$, 'setup: three job names in one queue');

select results_eq($$ select name from jobs.claim('{q_names}', 'w', 10, 3600, '{"names": ["names.y"]}') $$,
                  $$ values ('names.y') $$,
                  'names [y] claims only y, though x has a better priority');
select is((select count(*)::int from jobs.claim('{q_names}', 'w', 10, 3600, '{"names": []}')), 0,
          'names [] claims nothing');
select is((select count(*)::int from jobs.claim('{q_names}', 'w', 10, 3600, '{"names": ["names.nope"]}')), 0,
          'an unknown name claims nothing');
select results_eq($$ select name from jobs.claim('{q_names}', 'w', 10, 3600, '{"names": ["names.z", "names.x"]}') $$,
                  $$ values ('names.x'), ('names.z') $$,
                  'several names, answered in claim order');
select results_eq($$ select state::text from jobs.job where name like 'names.%' order by name $$,
                  $$ values ('running'), ('running'), ('running') $$, 'all three are now running');

select lives_ok($$ select * from jobs.enqueue('names.w', 'w1', '{}', '{"queue": "q_names"}') $$,
                'setup: another name');
select results_eq($$ select name from jobs.claim('{q_names}', 'w', 10, 3600, '{}') $$,
                  $$ values ('names.w') $$, 'without names, any name is claimed');
select * from finish();
rollback;
