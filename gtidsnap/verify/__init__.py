"""``gtidsnap verify``: a source table on the replica compared with its Delta mirror, range by range at
consistent points, while gtidsnap runs or after it ended.

``verifier`` (the comparison: ranges, the output awaited, keys changed meanwhile left out, rechecks),
``mirror_hashes`` (the mirror's side of a range hash, in Spark), ``row_diff`` (the rule rows are
compared by, pure). The server's side of a range hash and which tables it serves are
:mod:`gtidsnap.core.row_hash` (shared with :mod:`gtidsnap.source.chunk_sql`); the command is
:mod:`gtidsnap.cli.verify_command`.
"""
