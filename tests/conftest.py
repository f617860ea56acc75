"""Fixtures for the real servers live in tests/integration/fixtures; they start each server once per run.

Hypothesis runs without its per-example deadline: tests never time anything (a loaded CI machine made a
200 ms deadline fail a correct test); speed is measured by scripts/bench."""

from hypothesis import settings

settings.register_profile("gtidsnap", deadline=None)
settings.load_profile("gtidsnap")

pytest_plugins = [
    "tests.integration.fixtures.db_servers",
    "tests.integration.fixtures.kafka_server",
    "tests.integration.fixtures.spark_delta",
]
