"""Watching a run from outside: /metrics, /healthz and /readyz over HTTP (``[metrics] listen``)."""
