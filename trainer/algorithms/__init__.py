"""Learning algorithms.

``grpo.py`` holds the RL math (GRPO / Dr.GRPO / RLOO / REINFORCE++ advantages and the PPO-clip loss
from verl's core_algos); ``apo.py`` the prompt optimizer (beam search with textual gradients);
``sft.py`` rejection-sampling fine-tuning. The RL algorithm the facade runs is ``agl_stream_trainer.rl.RL``.
Submodules are imported on use (APO needs litellm, the others torch).
"""

from typing import Any

__all__ = ["APO", "SFT", "SFTConfig"]


def __getattr__(name: str) -> Any:
    if name == "APO":
        from agl_stream_trainer.algorithms.apo import APO

        return APO
    if name in ("SFT", "SFTConfig"):
        from agl_stream_trainer.algorithms import sft

        return getattr(sft, name)
    raise AttributeError(name)
