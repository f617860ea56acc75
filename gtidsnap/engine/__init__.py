"""The engine: the single-threaded loop, its pure next step, the background committer, the
stream pump and the checkpoint file. The only package that drives the others together (the wiring
in :mod:`gtidsnap.run` builds it)."""
