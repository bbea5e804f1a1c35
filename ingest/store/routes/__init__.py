"""The front door's routes, one router per resource of upstream's ``/v1/agl`` API, and OTLP's ``/v1/traces``."""
