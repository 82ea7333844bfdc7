-- Claim one job (mark it), then delete it in a second transaction: two commits per
-- job, the shape of claim + ack without batching.
with c as (select id from q where state = 0 and queue = 'default'
            order by id limit 1 for update skip locked),
     u as (update q set state = 1 from c where q.id = c.id returning q.id)
select coalesce(max(u.id), 0) as id from u \gset
delete from q where id = :id;
