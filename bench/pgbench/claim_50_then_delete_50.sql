-- Claim 50 jobs (mark them), then delete the 50 in a second transaction: two commits
-- per 50 jobs, the shape of a batched claim + ack_many. Needs -M prepared (:ids is
-- sent as a parameter).
with c as (select id from q where state = 0 and queue = 'default'
            order by id limit 50 for update skip locked),
     u as (update q set state = 1 from c where q.id = c.id returning q.id)
select coalesce(array_agg(u.id), '{}')::text as ids from u \gset
delete from q where id = any (:ids::bigint[]);
