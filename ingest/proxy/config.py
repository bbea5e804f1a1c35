"""What the LLM proxy forwards to: a litellm ``model_list`` plus the capture options.

``model_list`` keeps litellm's (and upstream ``LLMProxy``'s) syntax, so a config written for
upstream works here: ``{"model_name": "qwen", "litellm_params": {"model": "hosted_vllm/qwen",
"api_base": "http://gpu:8000/v1"}}``. Backend API keys live only in ``litellm_params`` and are
never recorded. Workers rebuild the config from ``AGL_INGEST_PROXY_CONFIG`` (JSON), which the
command line fills from ``--config FILE`` / ``--backend NAME=URL``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Mapping, Optional

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from agl_stream.config import Settings, SettingsError, env_name

CONFIG_ENV = env_name("ingest_proxy_config")

#: litellm providers that speak vLLM's extensions (``return_token_ids``) when pointed at a server
_VLLM_COMPATIBLE = frozenset({"hosted_vllm", "openai", "vllm"})


class ModelConfig(BaseModel):
    """One backend model, in litellm's Router syntax (``model_info`` holds the agl options)."""

    model_config = ConfigDict(extra="forbid")

    model_name: str = Field(min_length=1)
    litellm_params: dict[str, Any]
    model_info: dict[str, Any] = Field(default_factory=dict)

    @field_validator("litellm_params")
    @classmethod
    def _needs_model(cls, params: dict[str, Any]) -> dict[str, Any]:
        if not isinstance(params.get("model"), str) or "/" not in params["model"]:
            raise ValueError("litellm_params.model must be 'provider/model', e.g. 'hosted_vllm/qwen' or 'openai/m'")
        return params

    @property
    def provider(self) -> str:
        return str(self.litellm_params["model"]).split("/", 1)[0]

    @property
    def asks_token_ids(self) -> bool:
        """Whether to send ``return_token_ids``: set per model, else true for vLLM-style servers."""
        explicit = self.model_info.get("return_token_ids")
        if explicit is not None:
            return bool(explicit)
        return self.provider in _VLLM_COMPATIBLE and bool(self.litellm_params.get("api_base"))

    @property
    def max_tokens(self) -> Optional[int]:
        """A ceiling on the tokens one call may generate (``model_info.max_tokens``): a larger ``max_tokens`` /
        ``max_completion_tokens`` is lowered to it, a call without one gets it. For a small engine that unchanged
        agents ask for more than it can answer in time."""
        value = self.model_info.get("max_tokens")
        return int(value) if value is not None else None

    @field_validator("model_info")
    @classmethod
    def _positive_ceiling(cls, info: dict[str, Any]) -> dict[str, Any]:
        value = info.get("max_tokens")
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
            raise ValueError(f"model_info.max_tokens must be a positive integer, not {value!r}")
        return info

    @property
    def policy_version(self) -> Optional[int]:
        """A fixed policy version for backends that do not report one (``model_info.policy_version``)."""
        value = self.model_info.get("policy_version")
        return int(value) if value is not None else None


class ProxyConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    model_list: list[ModelConfig] = Field(min_length=1)
    #: ask vLLM-compatible backends for token ids (upstream's ``return_token_ids`` callback)
    return_token_ids: bool = True
    #: request logprobs even when the client did not (upstream's ``logprobs`` callback); k top alternatives
    logprobs: Optional[int] = Field(default=None, ge=0, le=20)
    #: unprefixed routes without x-rollout-id / x-attempt-id: 400 (True) or serve unrecorded (False)
    require_ids: bool = True
    num_retries: int = Field(default=0, ge=0)

    def model(self, name: str) -> Optional[ModelConfig]:
        return next((m for m in self.model_list if m.model_name == name), None)

    @property
    def model_names(self) -> list[str]:
        return sorted({m.model_name for m in self.model_list})

    # ---------------------------------------------------------------- loading

    @classmethod
    def from_mapping(cls, doc: Mapping[str, Any], **overrides: Any) -> "ProxyConfig":
        """From a litellm-style config document (extra top-level litellm keys are ignored)."""
        values = {k: v for k, v in doc.items() if k in cls.model_fields}
        values.update({k: v for k, v in overrides.items() if v is not None})
        try:
            return cls(**values)
        except ValidationError as exc:
            raise SettingsError(f"invalid proxy config: {exc}") from None

    @classmethod
    def from_file(cls, path: Path, **overrides: Any) -> "ProxyConfig":
        text = path.read_text()
        if path.suffix in (".yaml", ".yml"):
            import yaml

            doc = yaml.safe_load(text)
        else:
            doc = json.loads(text)
        if not isinstance(doc, dict):
            raise SettingsError(f"{path}: expected a mapping with a model_list")
        return cls.from_mapping(doc, **overrides)

    @classmethod
    def from_backends(cls, backends: list[str], api_key: Optional[str] = None, max_tokens: Optional[int] = None,
                      **overrides: Any) -> "ProxyConfig":
        """``NAME=URL`` pairs of OpenAI-compatible servers (vLLM, the embedded CPU server); ``max_tokens``: each
        one's ``model_info.max_tokens``."""
        models = []
        for spec in backends:
            name, sep, url = spec.partition("=")
            if not sep or not name or not url.startswith(("http://", "https://")):
                raise SettingsError(f"--backend {spec!r}: expected NAME=http://host:port/v1")
            models.append({"model_name": name, "litellm_params": {
                "model": f"openai/{name}", "api_base": url.rstrip("/"), "api_key": api_key or "EMPTY"},
                "model_info": {"max_tokens": max_tokens} if max_tokens is not None else {}})
        return cls.from_mapping({"model_list": models}, **overrides)

    @classmethod
    def from_settings(cls, settings: Settings) -> "ProxyConfig":
        """The config the CLI wrote for its workers (``AGL_INGEST_PROXY_CONFIG``, JSON)."""
        raw = settings.ingest_proxy_config
        if not raw:
            raise SettingsError(f"{CONFIG_ENV} is not set: start the proxy with --config FILE or --backend NAME=URL")
        try:
            doc = json.loads(raw)
        except ValueError as exc:
            raise SettingsError(f"{CONFIG_ENV} is not valid JSON: {exc}") from None
        return cls.from_mapping(doc)

    def to_env(self) -> dict[str, str]:
        return {CONFIG_ENV: self.model_dump_json()}
