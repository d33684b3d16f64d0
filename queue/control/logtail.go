package control

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/gpuq/gpuq/queue"
)

// LogStart is where a read of a job's output begins: after the log stream
// sequence After, the chunk of sequence Seq cut to begin at its byte Skip.
// The zero LogStart is the beginning of the output.
type LogStart struct {
	After uint64
	Seq   uint64
	Skip  int
}

// Trim returns the part of chunk seq's data the read shows.
func (s LogStart) Trim(seq uint64, data string) string {
	if seq != s.Seq || s.Skip <= 0 || s.Skip > len(data) {
		return data
	}
	return data[s.Skip:]
}

// lineStart is where one line of a job's output begins.
type lineStart struct {
	seq  uint64
	skip int
}

// LogTail finds where the job's last n lines of output stored now begin,
// counting only attempt's lines when attempt is not 0. A line begins a
// chunk when the chunk before it of the same attempt and stream ended one
// (chunks carry whole lines, except one longer than a chunk or a last line
// with no newline yet); of output of fewer lines than n, every line is
// shown.
func LogTail(ctx context.Context, js LogStreams, job uuid.UUID, n, attempt int) (LogStart, error) {
	if n <= 0 {
		return LogStart{}, nil
	}
	subject := queue.JobLogsSubject(job.String())
	last, err := lastSeq(ctx, js, queue.StreamLogs, subject)
	if err != nil || last == 0 {
		return LogStart{}, err
	}
	c, err := js.OrderedConsumer(ctx, queue.StreamLogs, jetstream.OrderedConsumerConfig{FilterSubjects: []string{subject}})
	if err != nil {
		return LogStart{}, fmt.Errorf("reading logs of job %s: %w", job, err)
	}
	// starts holds the beginnings of the last n lines seen, a ring whose
	// oldest entry is at next once it is full.
	starts := make([]lineStart, 0, min(n, 1024))
	next, full := 0, false
	add := func(l lineStart) {
		if !full {
			starts = append(starts, l)
			full = len(starts) == n
			return
		}
		starts[next] = l
		next = (next + 1) % n
	}
	// open says, per attempt and stream, that its latest chunk ended inside
	// a line, which the next chunk of that attempt and stream goes on with.
	open := map[string]bool{}
	var seen uint64
	for seen < last {
		batch, err := c.Fetch(500, jetstream.FetchMaxWait(2*time.Second))
		if err != nil {
			return LogStart{}, fmt.Errorf("reading logs of job %s: %w", job, err)
		}
		got := 0
		for msg := range batch.Messages() {
			got++
			meta, err := msg.Metadata()
			if err != nil {
				return LogStart{}, err
			}
			seen = meta.Sequence.Stream
			if seen > last {
				break
			}
			h := msg.Headers()
			a, _ := strconv.Atoi(h.Get(queue.HeaderAttempt))
			data := msg.Data()
			if (attempt != 0 && a != attempt) || len(data) == 0 {
				continue
			}
			key := strconv.Itoa(a) + "/" + h.Get(queue.HeaderStream)
			at := 0
			if open[key] {
				i := bytes.IndexByte(data, '\n')
				if i < 0 {
					continue // the open line goes on past this chunk
				}
				at = i + 1
			}
			for at < len(data) {
				add(lineStart{seq: seen, skip: at})
				i := bytes.IndexByte(data[at:], '\n')
				if i < 0 {
					break
				}
				at += i + 1
			}
			open[key] = data[len(data)-1] != '\n'
		}
		if err := batch.Error(); err != nil && !errors.Is(err, nats.ErrTimeout) {
			return LogStart{}, fmt.Errorf("reading logs of job %s: %w", job, err)
		}
		if got == 0 {
			break // trimmed or deleted meanwhile: what was read decides
		}
	}
	if len(starts) == 0 {
		return LogStart{}, nil
	}
	first := starts[next] // starts[0] until the ring is full

	return LogStart{After: first.seq - 1, Seq: first.seq, Skip: first.skip}, nil
}
