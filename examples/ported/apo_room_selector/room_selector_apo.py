"""Tune the room selector's prompt with APO: Agent Lightning's ``room_selector_apo.py``, ported.

Only the imports (and the APO logger's name) differ from upstream; see
docs/porting-from-agent-lightning.md. Needs an OpenAI-compatible endpoint in ``OPENAI_BASE_URL`` /
``OPENAI_API_KEY`` serving the models the agent, the judge and APO ask for.
"""

import logging
from typing import Tuple, cast

from openai import AsyncOpenAI
from room_selector import RoomSelectionTask, load_room_tasks, prompt_template_baseline, room_selector

from agl_stream import APO, Trainer, setup_logging
from agl_stream.adapter import TraceToMessages
from agl_stream.types import Dataset


def load_train_val_dataset() -> Tuple[Dataset[RoomSelectionTask], Dataset[RoomSelectionTask]]:
    tasks = load_room_tasks()
    half = len(tasks) // 2
    train = [tasks[i] for i in range(half)]
    val = [tasks[i] for i in range(half, len(tasks))]
    return cast(Dataset[RoomSelectionTask], train), cast(Dataset[RoomSelectionTask], val)


def setup_apo_logger(file_path: str = "apo.log") -> None:
    """Keep a copy of APO's log lines in a file."""
    handler = logging.FileHandler(file_path)
    handler.setLevel(logging.INFO)
    handler.setFormatter(logging.Formatter("%(asctime)s [%(levelname)s] (Process-%(process)d %(name)s)   %(message)s"))
    logging.getLogger("agl_stream_trainer.algorithms.apo").addHandler(handler)


def main() -> None:
    setup_logging()
    setup_apo_logger()

    openai_client = AsyncOpenAI()

    algo = APO[RoomSelectionTask](
        openai_client,
        val_batch_size=10,
        gradient_batch_size=4,
        beam_width=2,
        branch_factor=2,
        beam_rounds=2,
        _poml_trace=True,
    )
    trainer = Trainer(
        algorithm=algo,
        # more runners, more rollouts at once
        strategy={"type": "shm", "n_runners": 8, "main_thread": "algorithm"},
        # APO starts from this template (any resource key works)
        initial_resources={"prompt_template": prompt_template_baseline()},
        # APO reads the rollouts as chat messages
        adapter=TraceToMessages(),
    )
    dataset_train, dataset_val = load_train_val_dataset()
    trainer.fit(agent=room_selector, train_dataset=dataset_train, val_dataset=dataset_val)


if __name__ == "__main__":
    main()
