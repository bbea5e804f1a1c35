"""The rollout state machine: upstream's attempt/rollout status rules over Kafka topics (faust)."""

from agl_stream_processors.state_machine.rules import Outcome, RolloutState, retry_attempt_id

__all__ = ["Outcome", "RolloutState", "RolloutStateMachine", "StateMachineOptions", "retry_attempt_id"]


def __getattr__(name: str):  # type: ignore[no-untyped-def]
    # the faust app is imported on use, so the pure rules stay importable without faust
    if name in ("RolloutStateMachine", "StateMachineOptions", "CHANGELOG"):
        from agl_stream_processors.state_machine import app

        return getattr(app, name)
    raise AttributeError(name)
