"""LLM proxy built on litellm: OpenAI-compatible routes that record every call as a span."""
