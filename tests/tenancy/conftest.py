"""Fixtures of tests/tenancy: a real Prometheus factory and a real HTTP page server."""

from support.page_server import page_server
from support.prometheus_server import prometheus_server

__all__ = ["page_server", "prometheus_server"]
