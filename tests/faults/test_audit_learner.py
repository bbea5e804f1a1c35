"""audit_learner: the learner's surviving history across restarts (pure logic)."""

from __future__ import annotations

from dataclasses import dataclass

from tests.faults.audit import audit_learner


@dataclass
class Step:
    step: int
    policy_version: int
    rollout_ids: list[str]


def steps(first: int, last: int, prefix: str = "ro") -> list[Step]:
    return [Step(n, n, [f"{prefix}-{n}a", f"{prefix}-{n}b"]) for n in range(first, last + 1)]


def test_a_restart_from_a_checkpoint_keeps_what_was_checkpointed_then_the_new_run() -> None:
    # run 1 trained steps 1-5 and was killed; its checkpoint was step 3; run 2 trained 4-6 again
    audit = audit_learner([(0, steps(1, 5)), (3, steps(4, 6))])
    assert audit.problems == [] and audit.steps == [1, 2, 3, 4, 5, 6] and audit.duplicates == 0


def test_a_rollout_trained_twice_a_gap_and_a_version_that_goes_back_are_problems() -> None:
    twice = audit_learner([(0, steps(1, 3) + [Step(4, 4, ["ro-1a"])])])
    assert twice.duplicates == 1 and any("trained more than once" in p for p in twice.problems)
    gap = audit_learner([(0, steps(1, 2)), (2, steps(4, 5))])  # resumed from 2, but its first step is 4
    assert any("not continuous" in p for p in gap.problems)
    back = audit_learner([(0, [Step(1, 1, ["a"]), Step(2, 1, ["b"])])])
    assert any("only grow" in p for p in back.problems)
