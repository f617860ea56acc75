"""Snapshots: chunk windows (the watermark algorithm, pure), the planner that hands key ranges to
chunk readers and lets their rows out where their windows close, and the reader pools (processes,
the inline reader, Spark tasks). Imports the core and the source; never the engine."""
