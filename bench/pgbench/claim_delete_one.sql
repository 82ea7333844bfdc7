-- Claim-and-delete one job in one statement (one commit per job): the cheapest a
-- one-at-a-time consumer can be, with no record that the job ever ran.
delete from q
 where id = (select id from q where state = 0 and queue = 'default'
              order by id limit 1 for update skip locked);
