package workers

import (
	"context"
	"time"

	"github.com/google/uuid"

	"github.com/gpuq/gpuq/queue"
)

// Records is what a worker needs from the system of record: claim, lease,
// checkpoint and completion writes, each fenced by the attempt number, and
// its node's canary record. queue/store's Store implements it; the worker
// service will implement it over NATS so that workers hold no database
// credential.
type Records interface {
	ClaimMany(ctx context.Context, reqs []queue.ClaimRequest) ([]queue.ClaimResult, error)
	Heartbeat(ctx context.Context, id uuid.UUID, attempt int, lease time.Duration) error
	RecordCheckpoint(ctx context.Context, id uuid.UUID, attempt int, a queue.ArchiveRecord) (int, error)
	Succeed(ctx context.Context, id uuid.UUID, attempt int, outputs *queue.ArchiveRecord) error
	SucceedMany(ctx context.Context, refs []queue.AttemptRef) ([]bool, error)
	Fail(ctx context.Context, id uuid.UUID, attempt int, outcome string, exit *int, reason string) error
	Requeue(ctx context.Context, id uuid.UUID, attempt int, outcome string, exit *int, reason string) error
	EndAttempt(ctx context.Context, id uuid.UUID, attempt int, outcome string, exit *int) error
	MarkDead(ctx context.Context, id uuid.UUID, attempt int, reason string) error
	Job(ctx context.Context, id uuid.UUID) (*queue.Job, error)
	Node(ctx context.Context, id string) (*queue.Node, error)
	RecordCanary(ctx context.Context, r queue.CanaryRecord) (int64, *queue.Node, error)
}
