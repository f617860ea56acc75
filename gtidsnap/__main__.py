"""``python -m gtidsnap`` and the ``gtidsnap`` console script.

The script imports this module, not the command line: multiprocessing starts each chunk reader by
importing its parent's main script, so a reader then loads only this module, not typer, rich, pydantic
and the rest of the command line (~15 MB of RSS a reader).
"""


def console() -> None:
    """The ``gtidsnap`` command in a process of its own, which takes gtidsnap's memory habits first (not
    so a caller of :func:`gtidsnap.cli.app.main` in its own process)."""
    from gtidsnap.process_memory import lean_process

    lean_process()
    from gtidsnap.cli.app import main

    main()


if __name__ == "__main__":
    console()
