-- Runs once on the primary's first start; replicates to the replica.
CREATE USER 'repl'@'%' IDENTIFIED BY 'repl-trial-pw';
GRANT REPLICATION SLAVE ON *.* TO 'repl'@'%';
-- gtidsnap's own account: read-only, no locks, no writes.
CREATE USER 'gtidsnap'@'%' IDENTIFIED BY 'gtidsnap-trial-pw';
GRANT SELECT, REPLICATION CLIENT, REPLICATION SLAVE ON *.* TO 'gtidsnap'@'%';
