"""``python -m gtidsnap``: the same as the ``gtidsnap`` command."""

from gtidsnap.cli import main

main()
