"""Configuration: every setting defined once (:mod:`gtidsnap.config.settings`, the only source of
defaults), read from TOML < environment < flags (:mod:`gtidsnap.config.sources`) into one typed
:class:`gtidsnap.config.loading.Config`."""
