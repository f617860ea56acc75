"""Fixtures for the real servers live in tests/integration/fixtures; they start each server once per run."""

pytest_plugins = [
    "tests.integration.fixtures.db_servers",
    "tests.integration.fixtures.kafka_server",
    "tests.integration.fixtures.spark_delta",
]
