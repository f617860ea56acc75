"""Where records go. A sink makes its writes durable on ``commit`` and reports a position that the
checkpoint stores with the processed GTID set, so a restart can drop whatever came after it. The sink
protocols live with the engine's other ports (:mod:`gtidsnap.core.ports`)."""

from __future__ import annotations

from gtidsnap.core.ports import DrainingSink, SealingSink, Sink

__all__ = ["DrainingSink", "SealingSink", "Sink"]
