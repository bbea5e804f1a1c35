"""``agl-stream server``: the training service a ``agl_stream.Client`` talks to by URL.

It owns the pipeline for its lifetime (a local broker, topics and processors with the embedded
ClickHouse unless a cluster is configured), keeps uploaded datasets in the ``datasets`` table, runs
one job at a time (training through the ``RL`` algorithm, or an evaluation of a checkpoint's
weights) and exports checkpoints as model directories. See docs/training-service.md.
"""
