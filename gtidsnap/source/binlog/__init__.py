"""The binlog adapter: python-mysql-replication for the protocol, gtidsnap's own decoding of row
images and values, and statements read as text; out come the core's event types."""
