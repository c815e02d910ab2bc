#
# 006_sweep_locked.pl: the broker's sweep never stalls behind job rows that
# another transaction holds.
#
# 60 leases expire; the 50 that expire first (a whole sweep batch) belong to
# jobs whose status rows an open transaction has locked.  The sweep must
# page past them and sweep the other 10 while that transaction stays open,
# then sweep the 50 once it commits.
#
use strict;
use warnings FATAL => 'all';

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use SiloTest;
use Test::More;

my $node = silo_node('sweep_locked');

$node->safe_psql('postgres', q{
	SELECT count(silo.enqueue('st', id => 's' || lpad(i::text, 3, '0'),
							  retry_policy => '{"retryCount": 0}'))
	  FROM generate_series(1, 60) i});
# the first 50 leases expire a second before the last 10
is($node->safe_psql('postgres', q{SELECT count(*) FROM silo.lease('w', 'st', 50, 1000)}),
	'50', 'leased 50 tasks for 1 s');
is($node->safe_psql('postgres', q{SELECT count(*) FROM silo.lease('w', 'st', 10, 2000)}),
	'10', 'leased 10 tasks for 2 s');

# an open transaction holds the job rows of the 50 that expire first
my $holder = $node->background_psql('postgres');
$holder->query_safe('BEGIN');
is($holder->query_safe(q{
	SELECT count(*) FROM (
	  SELECT 1 FROM silo.job_status s
	   WHERE s.task_id IN (SELECT task_id FROM silo.task_lease ORDER BY expires_at LIMIT 50)
	     FOR UPDATE) x}),
	'50', 'an open transaction locks the 50 earliest-expiring jobs');

# while it stays open, the other 10 are swept by the broker
ok( poll_until($node,
		q{SELECT count(*) FROM silo.attempts WHERE error_code = 'WORKER_CRASHED'}, '10', 20),
	'the 10 unlocked expired leases are swept while the 50 are locked');
is($node->safe_psql('postgres', q{SELECT count(*) FROM silo.leases}),
	'50', 'the 50 locked ones are left in place, not lost');
ok(!defined wait_for_log_until($node, qr/could not sweep the expired lease/, 0, 0),
	'skipping a locked job row logs no warning');

$holder->query_safe('COMMIT');
$holder->quit;

ok( poll_until($node,
		q{SELECT count(*) FROM silo.attempts WHERE error_code = 'WORKER_CRASHED'}, '60', 20),
	'after the commit the other 50 are swept');
is($node->safe_psql('postgres',
		q{SELECT string_agg(status || ':' || n, ',' ORDER BY status)
		    FROM (SELECT status, count(*) n FROM silo.jobs GROUP BY status) x}),
	'Failed:60', 'every job ended Failed (no retries), none lost');

$node->stop;
done_testing();
