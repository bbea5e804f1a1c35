"""The parts of :class:`~agl_stream.client.StoreClient`, one job each: rollout writes, rollout reads, spans,
resources and workers. Each is a mixin over :class:`~agl_stream.client.store.base.StoreBase`, the state they
share; ``StoreClient`` puts them together and owns the lifecycle."""
