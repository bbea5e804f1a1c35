-- title: Dead letters by reason
-- description: Records nothing could process, by source topic, processor and reason.
-- panel: table
-- columns: source_topic, processor, reason, letters, last_seen
SELECT
    SourceTopic AS source_topic,
    Processor AS processor,
    substring(Reason, 1, 200) AS reason,
    count() AS letters,
    max(ReceivedAt) AS last_seen
FROM dead_letters FINAL
GROUP BY source_topic, processor, reason
ORDER BY letters DESC
LIMIT 50
