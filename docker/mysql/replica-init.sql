-- Runs once on the replica's first start: follow the primary by GTID auto-position.
CHANGE REPLICATION SOURCE TO SOURCE_HOST='mysql-primary', SOURCE_PORT=3306, SOURCE_USER='repl',
  SOURCE_PASSWORD='repl-trial-pw', SOURCE_AUTO_POSITION=1, GET_SOURCE_PUBLIC_KEY=1;
START REPLICA;
