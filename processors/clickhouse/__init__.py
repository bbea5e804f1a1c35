"""ClickHouse access for the processors: one client for chdb and HTTP DSNs, migrations, row conversion."""

from processors.clickhouse.client import ClickHouse, ClickHouseConfigError, Target, connect, parse_dsn
from processors.clickhouse.migrations import MigrationError, migrate

__all__ = ["ClickHouse", "ClickHouseConfigError", "MigrationError", "Target", "connect", "migrate", "parse_dsn"]
