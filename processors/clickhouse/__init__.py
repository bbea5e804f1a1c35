"""ClickHouse access for the processors: one client for chdb and HTTP DSNs, migrations, row conversion."""

from agl_stream_processors.clickhouse.client import ClickHouse, ClickHouseConfigError, Target, connect, parse_dsn
from agl_stream_processors.clickhouse.migrations import MigrationError, migrate

__all__ = ["ClickHouse", "ClickHouseConfigError", "MigrationError", "Target", "connect", "migrate", "parse_dsn"]
