"""The monitoring endpoint: ``/metrics`` (Prometheus text, or OpenMetrics when the scraper asks for it),
``/healthz`` and ``/readyz`` (200 with ``ok``, or 503 with one problem a line), on a daemon thread.

An IPv6 address listens as itself (``[::1]:9108``, the documented form, bound an IPv6 socket). A request
that fails (a client gone before its answer, a broken request) is logged once a kind with a count, never
as the traceback the standard library prints for each: a burst of clients that hang up wrote 300 of them
into one run's log."""

from __future__ import annotations

import logging
import socket
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from prometheus_client.exposition import choose_encoder
from prometheus_client.registry import CollectorRegistry

from gtidsnap.core.errors import ConfigError
from gtidsnap.observe.health import liveness, readiness
from gtidsnap.observe.metrics import RunCollector, RunView

log = logging.getLogger("gtidsnap.observe")
REPEAT_S = 60.0  # a failing request of one kind is logged at most this often, with how many failed


def split_listen(listen: str) -> tuple[str, int]:
    """``HOST:PORT`` (``[::1]:9108`` for IPv6) as the socket wants it."""
    host, _, port = listen.rpartition(":")
    return host.strip("[]"), int(port)


class RepeatedErrors:
    """An error that repeats in a loop, logged once a kind and then every ``every_s`` with how many times
    it came meanwhile, instead of a line (or a traceback) each time."""

    def __init__(self, logger: logging.Logger, every_s: float = REPEAT_S) -> None:
        self.logger, self.every_s = logger, every_s
        self._lock = threading.Lock()
        self._seen: dict[str, tuple[float | None, int, str]] = {}  # kind -> (logged at, since, last text)

    def __call__(self, kind: str, text: str) -> None:
        now = time.monotonic()
        with self._lock:
            logged_at, since, _ = self._seen.get(kind, (None, 0, text))
            if logged_at is not None and now - logged_at < self.every_s:
                self._seen[kind] = (logged_at, since + 1, text)
                return
            self._seen[kind] = (now, 0, text)
        self.logger.warning("%s%s", text, _more(since, now - logged_at) if logged_at is not None else "")

    def flush(self) -> None:
        """Say how many came since each kind was last logged (at the end: none goes unsaid)."""
        now = time.monotonic()
        with self._lock:
            seen, self._seen = self._seen, {}
        for logged_at, since, text in seen.values():
            if since and logged_at is not None:
                self.logger.warning("%s%s", text, _more(since, now - logged_at))


def _more(count: int, seconds: float) -> str:
    return f" ({count} more like it in the last {seconds:.0f} s)" if count else ""


class _Http(ThreadingHTTPServer):
    """The standard server, its failed requests logged as :class:`RepeatedErrors`, on IPv6 when asked."""

    daemon_threads = True
    request_queue_size = 128  # the standard 5 dropped a burst's connections (each retried a second later)

    def __init__(self, address: tuple[str, int], handler: Any) -> None:
        if ":" in address[0]:
            self.address_family = socket.AF_INET6
        self.errors = RepeatedErrors(log)
        super().__init__(address, handler)

    def handle_error(self, request: Any, client_address: Any) -> None:
        error = sys.exc_info()[1]
        kind = type(error).__name__
        self.errors(kind, f"monitoring endpoint: a request failed: {kind}: {error}")


class MonitoringServer:
    """Serves a run's :class:`RunView` at ``listen`` until :meth:`stop`."""

    def __init__(self, listen: str, view: RunView) -> None:
        self.view = view
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(RunCollector(view))
        handler = _handler(self)
        host, port = split_listen(listen)
        try:
            self._http = _Http((host, port), handler)
        except OSError as exc:
            raise ConfigError(
                f"metrics.listen = {listen!r}: cannot serve there: {exc.strerror or exc}"
            ) from None
        self._thread = threading.Thread(target=self._http.serve_forever, name="gtidsnap-metrics", daemon=True)

    @property
    def address(self) -> str:
        host, port = self._http.server_address[:2]
        name = host.decode() if isinstance(host, bytes) else str(host)
        return f"[{name}]:{port}" if ":" in name else f"{name}:{port}"

    def start(self) -> MonitoringServer:
        self._thread.start()
        log.info("monitoring on http://%s/metrics (/healthz, /readyz)", self.address)
        return self

    def stop(self) -> None:
        self._http.shutdown()
        self._http.server_close()
        self._http.errors.flush()


def _handler(server: MonitoringServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            path = self.path.split("?")[0]
            if path == "/metrics":
                encoder, content_type = choose_encoder(self.headers.get("Accept", ""))
                self._send(200, encoder(server.registry), content_type)
            elif path in ("/healthz", "/readyz"):
                facts = server.view.health()
                problems = liveness(facts) if path == "/healthz" else readiness(facts)
                body = "\n".join(problems or ["ok"]) + "\n"
                self._send(503 if problems else 200, body.encode(), "text/plain; charset=utf-8")
            else:
                self._send(
                    404, b"not found: try /metrics, /healthz or /readyz\n", "text/plain; charset=utf-8"
                )

        def _send(self, status: int, body: bytes, content_type: str) -> None:
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:  # scrapes are not worth a log line
            pass

    return Handler
