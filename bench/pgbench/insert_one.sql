-- Enqueue ceiling: one row per statement, one commit per job.
insert into q (payload) values ('{}');
