-- title: Span tree of the rollout
-- description: Every span of one rollout as a trace (Grafana's trace view columns), with its attributes, in per-attempt sequence order.
-- panel: traces
-- columns: traceID, spanID, parentSpanID, serviceName, operationName, startTime, duration, tags, serviceTags, statusCode, statusMessage, kind, attemptId, sequenceId
SELECT
    TraceId AS traceID,
    SpanId AS spanID,
    ParentSpanId AS parentSpanID,
    ServiceName AS serviceName,
    SpanName AS operationName,
    toUnixTimestamp64Nano(Timestamp) / 1000000 AS startTime,
    Duration / 1000000 AS duration,
    arrayMap(key -> map('key', key, 'value', SpanAttributes[key]), mapKeys(SpanAttributes)) AS tags,
    arrayMap(key -> map('key', key, 'value', ResourceAttributes[key]), mapKeys(ResourceAttributes)) AS serviceTags,
    StatusCode AS statusCode,
    StatusMessage AS statusMessage,
    SpanKind AS kind,
    AttemptId AS attemptId,
    SequenceId AS sequenceId
FROM spans FINAL
WHERE RolloutId = {rollout_id:String}
ORDER BY attemptId, sequenceId, startTime, spanID
