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
//
// It reads the log stream back from the job's last chunk, in windows four
// times longer each time, until one holds n lines or the stream's start:
// the tail of a job that wrote gigabytes costs what the tail holds, not
// the whole log. In a window that does not reach the stream's start, the
// first chunk of an attempt and stream may go on with a line begun before
// it; its first line is not counted, which can only add a line to the tail.
func LogTail(ctx context.Context, js LogStreams, job uuid.UUID, n, attempt int) (LogStart, error) {
	return logTail(ctx, js, job, n, attempt, logTailWindow)
}

// logTailWindow is the stream sequences LogTail reads first.
const logTailWindow = 4096

func logTail(ctx context.Context, js LogStreams, job uuid.UUID, n, attempt int, window uint64) (LogStart, error) {
	if n <= 0 {
		return LogStart{}, nil
	}
	subject := queue.JobLogsSubject(job.String())
	last, err := lastSeq(ctx, js, queue.StreamLogs, subject)
	if err != nil || last == 0 {
		return LogStart{}, err
	}
	for ; ; window *= 4 {
		from := uint64(1)
		if last > window {
			from = last - window + 1
		}
		start, found, err := tailFrom(ctx, js, job, from, last, n, attempt)
		if err != nil || found >= n || from == 1 {
			return start, err
		}
	}
}

// tailFrom reads the job's chunks of stream sequences from to last and
// returns where its last n lines among them begin, and how many lines it
// found (at most n).
func tailFrom(ctx context.Context, js LogStreams, job uuid.UUID, from, last uint64, n, attempt int) (LogStart, int, error) {
	cfg := jetstream.OrderedConsumerConfig{FilterSubjects: []string{queue.JobLogsSubject(job.String())}}
	if from > 1 {
		cfg.DeliverPolicy, cfg.OptStartSeq = jetstream.DeliverByStartSequencePolicy, from
	}
	c, err := js.OrderedConsumer(ctx, queue.StreamLogs, cfg)
	if err != nil {
		return LogStart{}, 0, fmt.Errorf("reading logs of job %s: %w", job, err)
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
	// a line, which the next chunk of that attempt and stream goes on with;
	// a window that does not begin the stream cannot tell of its first.
	open, seen := map[string]bool{}, map[string]bool{}
	take := func(seq uint64, msg jetstream.Msg) {
		h := msg.Headers()
		a, _ := strconv.Atoi(h.Get(queue.HeaderAttempt))
		data := msg.Data()
		if (attempt != 0 && a != attempt) || len(data) == 0 {
			return
		}
		key := strconv.Itoa(a) + "/" + h.Get(queue.HeaderStream)
		if !seen[key] {
			seen[key], open[key] = true, from > 1
		}
		i := 0
		if open[key] {
			nl := bytes.IndexByte(data, '\n')
			if nl < 0 {
				return // the open line goes on past this chunk
			}
			i = nl + 1
		}
		for i < len(data) {
			add(lineStart{seq: seq, skip: i})
			nl := bytes.IndexByte(data[i:], '\n')
			if nl < 0 {
				break
			}
			i += nl + 1
		}
		open[key] = data[len(data)-1] != '\n'
	}
	var at uint64
	for at < last {
		batch, err := c.Fetch(500, jetstream.FetchMaxWait(2*time.Second))
		if err != nil {
			return LogStart{}, 0, fmt.Errorf("reading logs of job %s: %w", job, err)
		}
		got := 0
		for msg := range batch.Messages() {
			got++
			meta, err := msg.Metadata()
			if err != nil {
				return LogStart{}, 0, err
			}
			if meta.Sequence.Stream > last {
				at = last // written since the read began
				break
			}
			take(meta.Sequence.Stream, msg)
			// Once the last chunk is read, the fetch need not wait for more.
			if at = meta.Sequence.Stream; at >= last || meta.NumPending == 0 {
				at = last
				break
			}
		}
		if err := batch.Error(); err != nil && !errors.Is(err, nats.ErrTimeout) {
			return LogStart{}, 0, fmt.Errorf("reading logs of job %s: %w", job, err)
		}
		if got == 0 {
			break // trimmed or deleted meanwhile: what was read decides
		}
	}
	if len(starts) == 0 {
		return LogStart{}, 0, nil
	}
	first := starts[next] // starts[0] until the ring is full
	return LogStart{After: first.seq - 1, Seq: first.seq, Skip: first.skip}, len(starts), nil
}
