"""``python -m gtidsnap``: the same as the ``gtidsnap`` command."""

from gtidsnap.cli.app import main

main()
