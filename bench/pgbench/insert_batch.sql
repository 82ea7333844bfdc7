-- Bulk enqueue ceiling: 1,000 rows per statement (the size of an enqueue_many batch).
insert into q (payload) select '{}' from generate_series(1, 1000);
