"""The algorithm-side client (upstream's store API over the pipeline) and topic views."""

from typing import TYPE_CHECKING

from agl_stream._porting import module_getattr

from agl_stream.client.errors import ConsistencyTimeout, SpanReaderUnavailable, UnsupportedOnStream
from agl_stream.client.follow import TopicFollower
from agl_stream.client.paging import UNSET, PaginatedResult, Unset
from agl_stream.client.resources import LATEST_KEY, ResourceCache, ResourcesNotFound
from agl_stream.client.span_reader import AttemptProgress, SpanQuery, SpanReader
from agl_stream.client.store_client import EnqueueRolloutRequest, StoreClient

__all__ = [
    "LATEST_KEY",
    "UNSET",
    "AttemptProgress",
    "ConsistencyTimeout",
    "EnqueueRolloutRequest",
    "PaginatedResult",
    "ResourceCache",
    "ResourcesNotFound",
    "SpanQuery",
    "SpanReader",
    "SpanReaderUnavailable",
    "StoreClient",
    "TopicFollower",
    "Unset",
    "UnsupportedOnStream",
]

if not TYPE_CHECKING:  # upstream's names in this module, kept or refused: the tables in agl_stream/_porting.py
    __getattr__ = module_getattr(__name__)
