"""The pieces of ``scripts/bench``: one module per measurement, plus the servers, the tables, the
concurrent writer, the gtidsnap CLI runner and the report. See ``scripts/bench.py`` for the command."""
