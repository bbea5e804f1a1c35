"""Resources the algorithm tunes and the agents consume: LLM endpoints and prompt templates."""

from __future__ import annotations

import logging
import sys
import time
from typing import TYPE_CHECKING, Annotated, Any, Literal, Optional, Union

from pydantic import BaseModel, ConfigDict, Field

if TYPE_CHECKING:
    from agl_stream.types.core import AttemptedRollout

logger = logging.getLogger(__name__)


class Resource(BaseModel):
    model_config = ConfigDict(extra="ignore")
    resource_type: str


class LLM(Resource):
    resource_type: Literal["llm"] = "llm"
    endpoint: str
    model: str
    api_key: Optional[str] = None
    sampling_parameters: dict[str, Any] = Field(default_factory=dict)
    policy_version: Optional[int] = Field(
        default=None, description="version of the weights this endpoint serves (agl-stream extension)"
    )

    def get_base_url(self, *args: Any, **kwargs: Any) -> str:
        return self.endpoint


class ProxyLLM(LLM):
    """An LLM reached through the LLM proxy; the endpoint gains a per-attempt route prefix.

    As upstream, reading ``endpoint`` directly logs a warning (outside ``get_base_url``): the bare
    endpoint has no route prefix, so calls through it are attributed to no attempt.
    """

    resource_type: Literal["proxy_llm"] = "proxy_llm"  # type: ignore[assignment]

    def __getattribute__(self, name: str) -> Any:
        # pydantic reads fields through __dict__ (validation, dumps, copies, equality), so only user code lands here
        if name == "endpoint" and sys._getframe(1).f_code.co_name != "get_base_url":
            logger.warning(
                "ProxyLLM.endpoint read directly: it lacks the rollout/attempt route prefix of the LLM proxy; "
                "use get_base_url(rollout_id, attempt_id) instead"
            )
        return super().__getattribute__(name)

    def get_base_url(self, rollout_id: Optional[str] = None, attempt_id: Optional[str] = None) -> str:
        """The endpoint routed to one attempt (``.../rollout/{rollout_id}/attempt/{attempt_id}[/v1]``);
        the bare endpoint when both ids are None. ``ValueError`` when only one is given, as upstream."""
        if rollout_id is None and attempt_id is None:
            return self.endpoint
        if not (isinstance(rollout_id, str) and isinstance(attempt_id, str)):
            raise ValueError("rollout_id and attempt_id must be strings or all be empty")
        base = self.endpoint.rstrip("/")
        suffix = ""
        if base.endswith("/v1"):
            base, suffix = base[: -len("/v1")], "/v1"
        return f"{base}/rollout/{rollout_id}/attempt/{attempt_id}{suffix}"

    def with_attempt(self, rollout_id: str, attempt_id: str) -> LLM:
        """Strip the proxy into a plain per-attempt ``LLM`` (what ``@rollout`` agents receive)."""
        return LLM(
            endpoint=self.get_base_url(rollout_id, attempt_id),
            model=self.model,
            api_key=self.api_key,
            sampling_parameters=dict(self.sampling_parameters),
            policy_version=self.policy_version,
        )

    def with_attempted_rollout(self, rollout: "AttemptedRollout") -> LLM:
        """Upstream's name for :meth:`with_attempt`, taking the attempted rollout."""
        return self.with_attempt(rollout.rollout_id, rollout.attempt.attempt_id)


class PromptTemplate(Resource):
    resource_type: Literal["prompt_template"] = "prompt_template"
    template: str
    engine: Literal["f-string", "jinja"] = "f-string"

    def format(self, **kwargs: Any) -> str:
        if self.engine == "f-string":
            return self.template.format(**kwargs)
        import jinja2  # only templates that ask for jinja pay for it

        return jinja2.Environment(undefined=jinja2.StrictUndefined).from_string(self.template).render(**kwargs)


ResourceUnion = Annotated[Union[LLM, ProxyLLM, PromptTemplate], Field(discriminator="resource_type")]
NamedResources = dict[str, ResourceUnion]


class ResourcesUpdate(BaseModel):
    """A versioned set of named resources; ``version`` increases with every update of the store."""

    model_config = ConfigDict(extra="ignore")
    resources_id: str
    resources: NamedResources
    create_time: float = Field(default_factory=time.time)
    update_time: float = Field(default_factory=time.time)
    version: int = Field(ge=0)
