"""Network front doors that turn outside traffic into ``agl.spans`` records.

- :mod:`agl_stream_ingest.otlp`: OTLP/HTTP trace receiver (``agl-stream ingest otlp``), for agents that export
  with any OpenTelemetry SDK or upstream's tracers;
- :mod:`agl_stream_ingest.proxy`: litellm-based LLM proxy (``agl-stream ingest proxy``) that records every call,
  with prompt/response token ids, as an ``openai.chat.completion`` span.

Both answer only after the broker acknowledged the spans, bind 127.0.0.1 by default, take an
optional bearer token (``AGL_INGEST_TOKEN``) and expose ``/health`` and ``/metrics``.
"""
