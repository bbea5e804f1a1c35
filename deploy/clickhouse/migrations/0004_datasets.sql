-- agl-stream schema, version 4: datasets uploaded to the training server (`agl-stream data upload`,
-- `Client.upload_data`), one row per JSONL line, fed by the agl.datasets topic. This table is the
-- durable copy: a restarted server lists and trains from it. An upload is complete when a split has
-- as many distinct lines as every row's `Lines` says; a redelivered record replaces its own row.

CREATE TABLE IF NOT EXISTS datasets
(
    DataId String,
    Split LowCardinality(String),
    Line UInt64,
    Lines UInt64,
    Item String CODEC(ZSTD(3)),
    FileName String,
    UploadedAt DateTime64(3, 'UTC'),
    InsertedAt DateTime64(3, 'UTC') DEFAULT now64(3)
)
ENGINE = ReplacingMergeTree(UploadedAt)
ORDER BY (DataId, Split, Line);
