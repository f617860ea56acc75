"""The pure core: GTID algebra, the plain data that flows between the pieces (tables, keys, events,
records, the snapshot context, the checkpoint value), the engine's ports and gtidsnap's errors.
No I/O, and no import of any other gtidsnap package: everything else builds on this."""
