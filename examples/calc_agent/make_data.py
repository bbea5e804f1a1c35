"""Write the calculator agent's datasets (deterministic; the JSONL files are committed).

Three-digit times two-digit multiplications (tier ``mul3x2`` of ``examples/arithmetic/tiers.py``):
SmolLM2-135M answers none of them unaided (pass@8 = 0) and, shown the calculator protocol once,
gets about half right by calling it - so RL has signal from the first step and room to teach the
call (``docs/task-difficulty.md``). Validation questions never appear in the training set.
"""

from __future__ import annotations

import json
from pathlib import Path

from examples.arithmetic.tiers import make_tier

HERE = Path(__file__).parent


def main() -> None:
    train = make_tier("mul3x2", 512, seed=1)
    seen = {r["question"] for r in train}
    val = [r for r in make_tier("mul3x2", 96, seed=2) if r["question"] not in seen][:64]
    for name, rows in (("train", train), ("val", val)):
        path = HERE / "data" / f"{name}.jsonl"
        path.parent.mkdir(exist_ok=True)
        path.write_text("".join(json.dumps(r) + "\n" for r in rows))
        print(f"wrote {path} ({len(rows)} rows)")


if __name__ == "__main__":
    main()
