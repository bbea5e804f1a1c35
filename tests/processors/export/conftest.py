"""ClickHouse store fixtures (both transports)."""

from tests.processors.clickhouse.store import ch, store_dsn, store_settings  # noqa: F401
