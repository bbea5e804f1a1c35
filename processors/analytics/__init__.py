"""SQL analytics over the agl tables: saved queries (shared with Grafana) and result rendering."""

from agl_stream_processors.analytics.saved import SavedQuery, SavedQueryError, get_saved_query, load_saved_queries

__all__ = ["SavedQuery", "SavedQueryError", "get_saved_query", "load_saved_queries"]
