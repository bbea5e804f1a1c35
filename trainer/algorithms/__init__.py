"""RL algorithms of the learner. ``grpo.py`` holds GRPO / Dr.GRPO / RLOO / REINFORCE++ with the PPO-clip loss."""
