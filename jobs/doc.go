// Package jobs is the job model and its run records, with no I/O beyond the
// record files: the Job that travels in the queue's job data and that the
// container reads as /job/job.json ([ParseJob] refuses unknown fields and
// names the field it refuses), the deterministic ids ([LocalRunID],
// [ChainJobID]) that let a Go and a Node producer deduplicate the same run,
// the outcomes and reasons a run ends with, and the per-attempt [Record]
// ([WriteRecord], [ReadRecords]) whose file name no other job id shares
// ([SanitizeJobID]). docs/records.md describes the record for operators.
package jobs
