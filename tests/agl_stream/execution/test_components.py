"""Objects reach the child processes intact: components files, and a whole job from a user's ``__main__``."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[2]


def _child_env(data_dir: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("AGL_")}
    env.update(AGL_DATA_DIR=str(data_dir), AGL_PARTITIONS="2", AGL_KAFKA_SESSION_TIMEOUT_MS="6000")
    return env


def test_main_script_objects_round_trip_through_a_components_file(tmp_path: Path) -> None:
    """Classes, @rollout functions and lambdas defined in a script arrive with their state in a fresh
    interpreter; the script's ``__main__`` block does not run there."""
    script = tmp_path / "script.py"
    script.write_text(textwrap.dedent('''
        import sys
        from pathlib import Path
        import agl_stream as agl
        from agl_stream.execution.components import write_components

        class Agent(agl.LitAgent):
            def __init__(self, max_turns):
                super().__init__(trained_agents="write")
                self.max_turns = max_turns

        @agl.rollout
        def fn_agent(task, llm):
            return 1.0

        if __name__ == "__main__":
            agent = Agent(max_turns=3)
            agent.set_runner(object())  # never sent
            path = write_components(Path(sys.argv[1]), {"agent": agent, "fn": fn_agent, "key": lambda x: x * 2})
            print(path)
    '''))
    written = subprocess.run([sys.executable, str(script), str(tmp_path / "c")], capture_output=True, text=True, cwd=tmp_path)
    assert written.returncode == 0, written.stderr
    path = written.stdout.strip()
    reader = textwrap.dedent(f'''
        from agl_stream.execution.components import read_components
        c = read_components({path!r})
        a = c["agent"]
        print(type(a).__name__, type(a).__module__, a.max_turns, a.trained_agents, a._runner)
        print(c["fn"].rollout_func.__name__, c["fn"].needs_resources, c["key"](21))
    ''')
    loaded = subprocess.run([sys.executable, "-c", reader], capture_output=True, text=True, cwd=ROOT)
    assert loaded.returncode == 0, loaded.stderr
    assert loaded.stdout.split("\n")[:2] == ["Agent __mp_main__ 3 write None", "fn_agent True 42"]


def test_unpicklable_state_is_a_clear_error(tmp_path: Path) -> None:
    import threading

    import agl_stream as agl
    from agl_stream.execution.components import ComponentError, write_components

    class Holder(agl.LitAgent):
        def __init__(self) -> None:
            super().__init__()
            self.lock = threading.Lock()

    with pytest.raises(ComponentError, match="cannot send the agent .*Holder"):
        write_components(tmp_path, {"agent": Holder()})


@pytest.mark.integration
@pytest.mark.slow
def test_trainer_objects_from_main_reach_runners_and_processors(tmp_path: Path) -> None:
    """A user's script passes an agent, adapter, tracer and hook *objects* defined in its ``__main__``
    (and a sibling module) to ``Trainer``; two runner processes and the processors use them."""
    user = tmp_path / "user"
    user.mkdir()
    for name in ("user_script.py", "user_helpers.py"):
        shutil.copy(HERE / name, user / name)
    out = tmp_path / "out"
    out.mkdir()
    run = subprocess.run([sys.executable, "user_script.py", str(out)], cwd=user, env=_child_env(tmp_path / "agl"),
                         capture_output=True, text=True, timeout=280)  # fmt: skip
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    result = json.loads((out / "result.json").read_text())
    assert result["rewards"] == [0.75, 1.5]  # the agent's bonus (0.5) reached the runner
    assert result["triplets"] == [{"tag": "t-42", "agent_match": "writer", "loaded_as": "__mp_main__"}] * 2
    lines = (out / "hooks.log").read_text().splitlines()
    starts = [line for line in lines if " start " in line]
    ends = [line for line in lines if " end " in line]
    assert len(starts) == 2 and all(line.startswith("H start ro-") and line.endswith("tracer=lbl-7") for line in starts)
    assert len(ends) == 2 and all(line.endswith("spans=2") for line in ends)  # the object span + the reward span
    assert not list((tmp_path / "agl" / "components").glob("*.pkl")), "components files are removed after the job"
