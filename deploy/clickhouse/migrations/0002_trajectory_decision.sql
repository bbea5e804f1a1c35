-- agl-stream schema, version 2: one rollout, one training signal.
--
-- Every trajectory carries the rollout state machine's decision about it (see docs/architecture.md,
-- "One rollout, one training signal"): 'final' for the attempt that ended its rollout (the only one
-- a learner trains, and the only one the reward queries count), 'superseded' for an attempt the
-- rollout moved past (a runner that stalled or lost the broker and reported after its attempt was
-- retried), 'undecided' for an attempt of a rollout the state machine never decided on. Rows
-- written before this migration were all treated as final, which the default keeps.
-- RolloutStatus is the rollout's status the decision was made on.

ALTER TABLE triplets ADD COLUMN IF NOT EXISTS Decision LowCardinality(String) DEFAULT 'final' AFTER Status;

ALTER TABLE triplets ADD COLUMN IF NOT EXISTS RolloutStatus LowCardinality(String) DEFAULT '' AFTER Decision;
