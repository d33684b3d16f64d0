// Command bench measures gpuq's core loop on an embedded NATS server and a
// private, durable PostgreSQL cluster, and runs River on the same cluster in
// the same run for comparison. It reports submission and end-to-end
// throughput, dispatch latency, recovery time, placement time and the store's
// attempts with jobs queued as one table and as JSON under results/.
package main
