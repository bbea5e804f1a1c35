"""A user's training script, run as ``python user_script.py OUT_DIR`` (its classes live in ``__main__``).

Every component carries constructor state that the child processes must receive intact: the agent's
``bonus``, the adapter's ``tag`` and ``agent_match``, the tracer's ``label``, the hook's path.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import agl_stream as agl
from agl_stream.kafka import RecordConsumer
from agl_stream.types import Trajectory
from user_helpers import RecordingHook

HERE_LOADED_AS = __name__  # "__main__" here, "__mp_main__" in the runner and processors processes


class BonusAgent(agl.LitAgent):
    def __init__(self, bonus: float) -> None:
        super().__init__()
        self.bonus = bonus

    def rollout(self, task, resources, rollout):  # type: ignore[no-untyped-def]
        agl.emit_object({"loaded_as": HERE_LOADED_AS})
        return task["x"] + self.bonus


class TaggingAdapter(agl.TracerTraceToTriplet):
    """One triplet per attempt carrying the adapter's own state (the processor runs this object)."""

    def __init__(self, tag: str, **kwargs) -> None:  # type: ignore[no-untyped-def]
        super().__init__(**kwargs)
        self.tag = tag

    def adapt(self, source):  # type: ignore[no-untyped-def]
        reward = agl.find_final_reward(source)
        meta = {"tag": self.tag, "agent_match": self.agent_match, "loaded_as": HERE_LOADED_AS}
        return [agl.Triplet(prompt={"token_ids": [1]}, response={"token_ids": [2]}, reward=reward, metadata=meta)]


class LabelledTracer(agl.OtelTracer):
    def __init__(self, label: str) -> None:
        super().__init__()
        self.label = label


@agl.algo
async def collect(*, client, settings, train_dataset):  # type: ignore[no-untyped-def]
    from agl_stream.algorithm import RolloutResults, run_dataset

    results = await RolloutResults(settings).start()
    try:
        outcomes = await run_dataset(client, results, train_dataset, mode="train", timeout=120)
    finally:
        await results.stop()
    ids = {o.rollout_id for o in outcomes if o is not None}
    trajectories: dict[str, dict] = {}
    async with RecordConsumer(settings, [settings.topic("triplets")], group_id=None) as consumer:
        for _ in range(120):
            good, _bad = await consumer.get_decoded(Trajectory, timeout=0.5)
            for item in good:
                trajectories[item.value.rollout_id] = item.value.triplets[0].metadata
            if ids <= set(trajectories):
                break
    return {"rewards": sorted(o.final_reward for o in outcomes if o is not None), "triplets": list(trajectories.values())}


if __name__ == "__main__":
    out = Path(sys.argv[1])
    trainer = agl.Trainer(
        algorithm=collect,
        n_runners=2,
        adapter=TaggingAdapter(tag="t-42", agent_match="writer"),
        tracer=LabelledTracer("lbl-7"),
        hooks=[RecordingHook(str(out / "hooks.log"), prefix="H")],
    )
    result = trainer.fit(BonusAgent(bonus=0.5), train_dataset=[{"x": 0.25}, {"x": 1.0}])
    (out / "result.json").write_text(json.dumps(result))
