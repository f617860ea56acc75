"""Signals from a Kafka topic: the message protocol (pure), the consumer and its Kafka settings.
The consumer only puts commands on the engine's queue."""
