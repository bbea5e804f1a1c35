"""Opt-in OpenTelemetry instrumentations that capture what training needs (token ids)."""
