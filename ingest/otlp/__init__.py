"""OTLP/HTTP trace receiver: ``POST /v1/traces`` (protobuf or JSON) -> ``agl.spans``."""
