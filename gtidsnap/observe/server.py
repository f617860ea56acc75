"""The monitoring endpoint: ``/metrics`` (Prometheus text, or OpenMetrics when the scraper asks for it),
``/healthz`` and ``/readyz`` (200 with ``ok``, or 503 with one problem a line), on a daemon thread."""

from __future__ import annotations

import logging
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from prometheus_client.exposition import choose_encoder
from prometheus_client.registry import CollectorRegistry

from gtidsnap.core.errors import ConfigError
from gtidsnap.observe.health import liveness, readiness
from gtidsnap.observe.metrics import RunCollector, RunView

log = logging.getLogger("gtidsnap.observe")


def split_listen(listen: str) -> tuple[str, int]:
    """``HOST:PORT`` (``[::1]:9108`` for IPv6) as the socket wants it."""
    host, _, port = listen.rpartition(":")
    return host.strip("[]"), int(port)


class MonitoringServer:
    """Serves a run's :class:`RunView` at ``listen`` until :meth:`stop`."""

    def __init__(self, listen: str, view: RunView) -> None:
        self.view = view
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(RunCollector(view))
        handler = _handler(self)
        host, port = split_listen(listen)
        try:
            self._http = ThreadingHTTPServer((host, port), handler)
        except OSError as exc:
            raise ConfigError(
                f"metrics.listen = {listen!r}: cannot serve there: {exc.strerror or exc}"
            ) from None
        self._http.daemon_threads = True
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
