"""The settings the embedded ClickHouse engine (chdb) starts with: bounds on its memory.

The engine lives inside the process that opens it (the sinks', during a local run), and nothing
else configures it: a ClickHouse server reads its own config, so none of this applies to an
``http(s)://`` DSN. ClickHouse's own defaults are sized for a server owning the machine: a memory
limit of 90% of RAM, 5 GiB mark, skip-index mark and primary-index caches. (Caches only features we
do not use can fill, vector and text indexes or Parquet metadata, are left as they are.) Why each value
below, and what it moved when measured: docs/performance.md, "Memory in a long run: the embedded
engine" (``tests/benchmarks/bench_engine_memory.py``).

How they reach the engine: as parameters of the first connection's string (``chdb.connect("dir?name=value")``,
through clickhouse-connect's ``chdb_options``), which the engine takes as its start-up arguments:
server settings (caches, memory limit, pools) and session settings (``max_memory_usage``) alike.
Two traps, both checked by ``tests/processors/clickhouse/test_engine.py``: server settings given by
a later connection to an engine already running in the process are ignored, and a name the engine
does not know is ignored without an error. So read them back (``system.server_settings``,
``system.settings``) when changing them.

``AGL_CLICKHOUSE_MAX_MEMORY_MB`` sets the limit (0: ClickHouse's own); ``AGL_CLICKHOUSE_ENGINE_SETTINGS``
(``name=value[,name=value]``) overrides any default below or adds any other setting.
"""

from __future__ import annotations

from typing import Optional

from agl_stream.config import Settings, parse_engine_settings

MiB = 1024 * 1024

#: ClickHouse's error name when a memory limit stops an allocation (code 241).
MEMORY_LIMIT_EXCEEDED = "MEMORY_LIMIT_EXCEEDED"

#: Engine defaults besides the memory limit: ``max_server_memory_usage`` comes from ``clickhouse_max_memory_mb``
#: (512 MiB: about 2.5x the largest tracked memory measured, 210 MB; 128 MiB made inserts fail).
#: The caches hold what reads bring in (the sinks only insert; the SQL door, dashboard and trainer read).
#: Our parts' marks are small (~0.1 MB of marks for 20,000 rollouts), so these caps bound a long run's
#: worst case without costing a cache miss today; the caches count against the limit, and ClickHouse
#: never evicts them to make room for an insert.
ENGINE_DEFAULTS: dict[str, str] = {
    "mark_cache_size": str(32 * MiB),  # ClickHouse's: 5 GiB
    "index_mark_cache_size": str(8 * MiB),  # marks of the spans' skip indexes; 5 GiB
    "primary_index_cache_size": str(8 * MiB),  # only with the use_primary_key_cache table setting; 5 GiB
    "query_condition_cache_size": str(8 * MiB),  # on by default for WHERE clauses; 100 MiB
    "compiled_expression_cache_size": str(8 * MiB),  # 128 MiB
    # ClickHouse's memory worker returns jemalloc's dirty (freed, still resident) pages to the kernel once
    # they pass this share of the limit. ClickHouse's 0.2 is 4.5 GB of ClickHouse's own limit on a 24 GB
    # machine, so freed merge memory stayed resident for jemalloc's 5 s decay; 0.1 of 512 MiB is 51 MiB.
    # This, not the limit itself, is what lowered the sinks' RSS (the limit with the purge off did not).
    "memory_worker_purge_dirty_pages_threshold_ratio": "0.1",
    # Merges are the engine's working memory: 80-175 MB each for the spans table (vertical merges, ~4 KB
    # of attributes per row), about the same whatever the part sizes. ClickHouse runs up to pool size x
    # ratio (2 x 2) merges at once; in the full stack four at once took the tracked memory to 290 MB,
    # one at a time kept it under 210 MB over 20,000 rollouts. One merge at a time keeps up with four
    # times the benchmark's insert rate; small parts wait while a large merge runs (up to ~150 parts).
    "background_pool_size": "1",
    "background_merges_mutations_concurrency_ratio": "1",
}


def engine_settings(settings: Optional[Settings] = None) -> dict[str, str]:
    """The settings an embedded engine starts with: :data:`ENGINE_DEFAULTS`, the memory limit, then
    ``clickhouse_engine_settings`` on top (``settings`` defaults to the environment's)."""
    settings = settings if settings is not None else Settings.from_env()
    out = dict(ENGINE_DEFAULTS)
    if settings.clickhouse_max_memory_mb:
        out["max_server_memory_usage"] = str(settings.clickhouse_max_memory_mb * MiB)
    if settings.clickhouse_engine_settings:
        out.update(parse_engine_settings(settings.clickhouse_engine_settings))
    return out


def memory_limit_hint(message: str) -> str:
    """What to add to the embedded engine's MEMORY_LIMIT_EXCEEDED (ClickHouse's message already names the
    maximum): which setting moves that limit."""
    if "(total)" in message:  # max_server_memory_usage
        return "the embedded engine's limit: raise AGL_CLICKHOUSE_MAX_MEMORY_MB (0 = ClickHouse's own) or use a server"
    return "a per-query limit of the embedded engine (max_memory_usage...): see AGL_CLICKHOUSE_ENGINE_SETTINGS"


__all__ = ["ENGINE_DEFAULTS", "MEMORY_LIMIT_EXCEEDED", "MiB", "engine_settings", "memory_limit_hint"]
