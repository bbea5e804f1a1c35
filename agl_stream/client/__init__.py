"""The algorithm-side client (enqueue rollouts, publish resources, wait for rollouts) and topic views."""

from agl_stream.client.follow import TopicFollower
from agl_stream.client.resources import LATEST_KEY, ResourceCache, ResourcesNotFound
from agl_stream.client.store_client import EnqueueRolloutRequest, StoreClient

__all__ = ["LATEST_KEY", "EnqueueRolloutRequest", "ResourceCache", "ResourcesNotFound", "StoreClient", "TopicFollower"]
