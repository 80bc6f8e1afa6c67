// Package bench is Cairn's load generator, behind `cairn bench`. It runs
// closed-loop workers at each requested concurrency for a fixed time,
// records every latency exactly (no sampling, no buckets), and reports
// ops/s, MB/s and percentiles. The same GET loop measures a plain HTTP
// server (nginx) serving the same files, so comparisons are like for like.
// EC (`cairn bench ec`) measures erasure coding on data servers it starts
// in its own process.
package bench
