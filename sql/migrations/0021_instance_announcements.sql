-- gpuq schema: every instance event is announced on JetStream (stream
-- GPUQ_INSTANCES, subject gpuq.instances.<pool>.<instance>) after the
-- transaction that recorded it commits. announced marks the events that
-- were: a publish that failed, or a server that died before it, is repeated
-- by the next pass, in the order of the events' ids (JetStream drops a
-- repeat by its message id). Events recorded before this version count as
-- announced: nobody listened for them.
ALTER TABLE instance_events ADD COLUMN announced boolean NOT NULL DEFAULT true;
ALTER TABLE instance_events ALTER COLUMN announced SET DEFAULT false;

CREATE INDEX instance_events_unannounced ON instance_events (id) WHERE NOT announced;
