-- agl-stream schema, version 5: one row per learner run, fed by the agl.training_runs topic (the learner
-- writes a record when a run starts and when it ends). A run that trained fewer learner steps than asked
-- says why in `Shortfall` (e.g. "0 learner steps: all 16 groups had equal rewards (16 at 0)"); the
-- dashboard's Training section lists the runs. The newest record of a run wins (UpdatedAt).

CREATE TABLE IF NOT EXISTS training_runs
(
    RunId String,
    Status LowCardinality(String),
    StartedAt DateTime64(3, 'UTC'),
    UpdatedAt DateTime64(3, 'UTC'),
    EndedAt Nullable(DateTime64(3, 'UTC')),
    Steps UInt64,
    AskedSteps Nullable(UInt64),
    PolicyVersion UInt64,
    StopReason String,
    Shortfall String,
    Error String,
    Algorithm LowCardinality(String),
    Aggregation LowCardinality(String),
    TrainedGroups UInt64,
    EqualRewardGroups UInt64,
    DroppedGroups UInt64,
    LeftOutGroups UInt64,
    FailedRollouts UInt64,
    InsertedAt DateTime64(3, 'UTC') DEFAULT now64(3)
)
ENGINE = ReplacingMergeTree(UpdatedAt)
ORDER BY RunId;
