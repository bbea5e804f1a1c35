"""trainer/: closes the loop from ``agl.triplets`` to new policy weights served to the agents.

- ``scheduler.py``   dataset -> ``agl.tasks`` in GRPO groups, bounded rollouts in flight (``agl.rollouts``)
- ``batching.py``    ``agl.triplets`` (group ``agl-learner``) -> batches of complete groups, staleness bound
- ``algorithms/``    ``batch.py`` (triplets -> tensors, masks) and ``grpo.py`` (GRPO/RLOO/REINFORCE++ with
                     the PPO-clip loss, all terms from ``verl.trainer.ppo.core_algos``)
- ``backends/hf.py`` a transformers causal LM as a trainable policy (AdamW, LR schedule, clipping)
- ``learner.py``     the step loop: batch -> step -> version + 1 -> publish -> checkpoint -> metrics
- ``checkpoint.py``  safetensors model + optimizer, policy version and consumer offsets
- ``engines/``       ``InferenceEngine.publish(version, weights)``: ``embedded`` (CPU OpenAI server) and ``vllm``
- ``publisher.py``   engine publish + the ``ResourcesUpdate`` on ``agl.resources``
- ``metrics.py``     per-step metrics to logs, the ``agl.training_steps`` topic, TensorBoard / wandb
- ``service.py``, ``cli.py``, ``config.py``  ``agl-stream trainer --config trainer.yaml`` and ``agl-stream serve``
"""
