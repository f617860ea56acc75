"""The ``gtidsnap`` command line: typer and rich over the library, which never prints."""
