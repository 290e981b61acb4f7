"""The store tests' PostgreSQL fixtures (``pg_server``, ``pg_url``): defined in
``store/store_support.py``, shared with ``tests/fleet/`` through its conftest."""

from __future__ import annotations

from store.store_support import pg_server, pg_url

__all__ = ["pg_server", "pg_url"]
