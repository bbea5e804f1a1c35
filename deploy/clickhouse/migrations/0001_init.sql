-- agl-stream schema, version 1.
--
-- Every table is a ReplacingMergeTree whose ORDER BY is the record's natural key, so a batch that
-- is inserted twice (a sink restarted after a crash re-reads uncommitted Kafka offsets) collapses
-- into one logical row. Merges are asynchronous: queries that must count exactly use FINAL or
-- GROUP BY the key. Timestamps are UTC. Statements are separated by a line ending in ';'.
-- TTLs count from InsertedAt (ingestion), not from the record's own time, so replaying or
-- back-filling old data never loses it on arrival; change them with ALTER TABLE ... MODIFY TTL.

CREATE TABLE IF NOT EXISTS spans
(
    -- the OpenTelemetry otel_traces layout (what the ClickHouse exporter and Grafana's plugin read)
    Timestamp DateTime64(9, 'UTC') CODEC(Delta, ZSTD(1)),
    TraceId String CODEC(ZSTD(1)),
    SpanId String CODEC(ZSTD(1)),
    ParentSpanId String CODEC(ZSTD(1)),
    TraceState String CODEC(ZSTD(1)),
    SpanName LowCardinality(String) CODEC(ZSTD(1)),
    SpanKind LowCardinality(String) CODEC(ZSTD(1)),
    ServiceName LowCardinality(String) CODEC(ZSTD(1)),
    ResourceAttributes Map(LowCardinality(String), String) CODEC(ZSTD(1)),
    ScopeName String CODEC(ZSTD(1)),
    ScopeVersion String CODEC(ZSTD(1)),
    SpanAttributes Map(LowCardinality(String), String) CODEC(ZSTD(1)),
    Duration UInt64 CODEC(ZSTD(1)),
    StatusCode LowCardinality(String) CODEC(ZSTD(1)),
    StatusMessage String CODEC(ZSTD(1)),
    Events Nested
    (
        Timestamp DateTime64(9, 'UTC'),
        Name LowCardinality(String),
        Attributes Map(LowCardinality(String), String),
        JsonKeys Array(String)
    ) CODEC(ZSTD(1)),
    Links Nested
    (
        TraceId String,
        SpanId String,
        TraceState String,
        Attributes Map(LowCardinality(String), String),
        JsonKeys Array(String)
    ) CODEC(ZSTD(1)),
    -- agl-stream additions: the attempt a span belongs to and its per-attempt order
    RolloutId String CODEC(ZSTD(1)),
    AttemptId String CODEC(ZSTD(1)),
    SequenceId UInt64 CODEC(ZSTD(1)),
    -- attribute keys whose values are JSON (numbers, bools, lists): strings are stored as they are,
    -- so SpanAttributes['gen_ai.request.model'] reads naturally and the original types can be restored
    SpanAttributesJsonKeys Array(String) CODEC(ZSTD(1)),
    ResourceAttributesJsonKeys Array(String) CODEC(ZSTD(1)),
    ResourceSchemaUrl String CODEC(ZSTD(1)),
    EndTimeMissing Bool DEFAULT false,
    InsertedAt DateTime64(3, 'UTC') DEFAULT now64(3) CODEC(Delta, ZSTD(1)),
    INDEX idx_trace_id TraceId TYPE bloom_filter(0.001) GRANULARITY 1,
    INDEX idx_span_name SpanName TYPE set(256) GRANULARITY 4,
    INDEX idx_duration Duration TYPE minmax GRANULARITY 1
)
ENGINE = ReplacingMergeTree
PARTITION BY toDate(Timestamp)
ORDER BY (RolloutId, AttemptId, SpanId)
TTL toDateTime(InsertedAt) + INTERVAL 30 DAY
SETTINGS index_granularity = 8192;

-- Latest status snapshot of every rollout (the compacted agl.rollouts topic as a table).
CREATE TABLE IF NOT EXISTS rollouts
(
    RolloutId String,
    Status LowCardinality(String),
    Mode LowCardinality(String),
    ResourcesId String,
    StartTime DateTime64(6, 'UTC'),
    EndTime Nullable(DateTime64(6, 'UTC')),
    Attempts UInt32,
    AttemptId String,
    AttemptSequenceId UInt32,
    AttemptStatus LowCardinality(String),
    WorkerId String,
    Input String CODEC(ZSTD(3)),
    TaskKey UInt64 MATERIALIZED cityHash64(Input),
    Config String,
    Metadata String,
    UpdatedAt DateTime64(6, 'UTC'),
    InsertedAt DateTime64(3, 'UTC') DEFAULT now64(3)
)
ENGINE = ReplacingMergeTree(UpdatedAt)
ORDER BY RolloutId
TTL toDateTime(InsertedAt) + INTERVAL 180 DAY;

-- Attempt lifecycle events (started / heartbeat / finished) as reported by runners.
CREATE TABLE IF NOT EXISTS attempts
(
    Timestamp DateTime64(6, 'UTC'),
    Kind LowCardinality(String),
    RolloutId String,
    AttemptId String,
    AttemptSequenceId UInt32,
    WorkerId String,
    Status LowCardinality(String),
    Error String,
    Mode LowCardinality(String),
    ResourcesId String,
    SpanCount Nullable(UInt64),
    Stats String,
    Metadata String,
    InsertedAt DateTime64(3, 'UTC') DEFAULT now64(3)
)
ENGINE = ReplacingMergeTree
PARTITION BY toYYYYMM(Timestamp)
ORDER BY (RolloutId, AttemptId, Kind, Timestamp)
TTL toDateTime(InsertedAt) + INTERVAL 90 DAY;

-- Every version of the resources (LLM endpoints, prompt templates) the algorithm published.
CREATE TABLE IF NOT EXISTS resources
(
    ResourcesId String,
    Version UInt64,
    CreateTime DateTime64(6, 'UTC'),
    UpdateTime DateTime64(6, 'UTC'),
    PolicyVersion Nullable(UInt64),
    ResourceNames Array(String),
    Resources String CODEC(ZSTD(3)),
    InsertedAt DateTime64(3, 'UTC') DEFAULT now64(3)
)
ENGINE = ReplacingMergeTree(UpdateTime)
ORDER BY (ResourcesId, Version);

-- One row per triplet of every trajectory on agl.triplets (and of replays, told apart by Adapter).
CREATE TABLE IF NOT EXISTS triplets
(
    RolloutId String,
    AttemptId String,
    AttemptSequenceId UInt32,
    Adapter LowCardinality(String),
    TripletIndex UInt32,
    TripletCount UInt32,
    GroupId String,
    Mode LowCardinality(String),
    ResourcesId String,
    Status LowCardinality(String),
    PromptTokenIds Array(UInt32) CODEC(ZSTD(1)),
    ResponseTokenIds Array(UInt32) CODEC(ZSTD(1)),
    ResponseLogprobs Array(Float32) CODEC(ZSTD(1)),
    HasLogprobs Bool,
    PromptTokens UInt32 MATERIALIZED length(PromptTokenIds),
    ResponseTokens UInt32 MATERIALIZED length(ResponseTokenIds),
    Reward Nullable(Float64),
    FinalReward Nullable(Float64),
    PolicyVersion Nullable(UInt64),
    SpanCount UInt32,
    Metadata String CODEC(ZSTD(3)),
    TrajectoryMetadata String CODEC(ZSTD(3)),
    FinishedAt Nullable(DateTime64(6, 'UTC')),
    CreatedAt DateTime64(6, 'UTC'),
    InsertedAt DateTime64(3, 'UTC') DEFAULT now64(3)
)
ENGINE = ReplacingMergeTree(CreatedAt)
PARTITION BY toYYYYMM(CreatedAt)
ORDER BY (RolloutId, AttemptId, Adapter, TripletIndex)
TTL toDateTime(InsertedAt) + INTERVAL 180 DAY;

-- Latest heartbeat of every runner worker.
CREATE TABLE IF NOT EXISTS workers
(
    WorkerId String,
    Status LowCardinality(String),
    LastHeartbeatTime Nullable(DateTime64(6, 'UTC')),
    LastDequeueTime Nullable(DateTime64(6, 'UTC')),
    LastBusyTime Nullable(DateTime64(6, 'UTC')),
    LastIdleTime Nullable(DateTime64(6, 'UTC')),
    CurrentRolloutId String,
    CurrentAttemptId String,
    HeartbeatStats String,
    UpdatedAt DateTime64(6, 'UTC'),
    InsertedAt DateTime64(3, 'UTC') DEFAULT now64(3)
)
ENGINE = ReplacingMergeTree(UpdatedAt)
ORDER BY WorkerId;

-- Records nothing could process, with the reason and the original bytes. The key is where the
-- record came from, so the copy a sink writes directly and the one that arrives via agl.dlq collapse.
CREATE TABLE IF NOT EXISTS dead_letters
(
    SourceTopic LowCardinality(String),
    Partition Int32,
    Offset Int64,
    Processor LowCardinality(String),
    PayloadHash UInt64,
    Key String,
    Payload String CODEC(ZSTD(3)),
    Reason String,
    ErrorType LowCardinality(String),
    ReceivedAt DateTime64(6, 'UTC'),
    InsertedAt DateTime64(3, 'UTC') DEFAULT now64(3)
)
ENGINE = ReplacingMergeTree
ORDER BY (SourceTopic, Processor, Partition, Offset, PayloadHash)
TTL toDateTime(InsertedAt) + INTERVAL 30 DAY;

-- Learner metrics, one row per optimizer step (written by trainer/).
CREATE TABLE IF NOT EXISTS training_steps
(
    RunId String,
    Step UInt64,
    PolicyVersion UInt64,
    Timestamp DateTime64(3, 'UTC'),
    Loss Float64,
    PolicyLoss Float64,
    KL Float64,
    Entropy Float64,
    RewardMean Float64,
    RewardStd Float64,
    AdvantageMean Float64,
    AdvantageStd Float64,
    GradNorm Float64,
    TokensPerSecond Float64,
    StalenessMean Float64,
    PublishSeconds Float64,
    NumTriplets UInt64,
    NumSequences UInt64,
    LearningRate Float64,
    Extra Map(String, Float64),
    InsertedAt DateTime64(3, 'UTC') DEFAULT now64(3)
)
ENGINE = ReplacingMergeTree(Timestamp)
ORDER BY (RunId, Step);
