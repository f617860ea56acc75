"""The replica, read-only: its connection, catalog, keyset chunk SQL and result rows, the low
watermark, preflight checks, and (``binlog/``) the binlog stream decoded into the core's events.
Imports the core and the filters; never the engine."""
