package queue

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// LogChunk is a batch of a job's output lines from one attempt and stream.
type LogChunk struct {
	Attempt int
	Stream  string // stdout or stderr
	Data    []byte
}

// NewLogMsg builds the message that carries a chunk of a job's output on
// pool.
func NewLogMsg(pool string, job uuid.UUID, c LogChunk) *nats.Msg {
	msg := nats.NewMsg(LogSubject(pool, job.String()))
	msg.Header.Set(HeaderAttempt, strconv.Itoa(c.Attempt))
	msg.Header.Set(HeaderStream, c.Stream)
	msg.Data = c.Data
	return msg
}

// ReadLogs writes a job's stored output to w. With follow it keeps writing
// new output until done returns true after a chunk or an idle second, or ctx
// ends.
func ReadLogs(ctx context.Context, js OrderedConsumers, job uuid.UUID, w io.Writer, follow bool, done func() bool) error {
	return ReadLogChunks(ctx, js, job, follow, done, func(c LogChunk) error {
		_, err := w.Write(c.Data)
		return err
	})
}

// ReadLogChunks is ReadLogs calling fn with each chunk and its attempt and
// stream.
func ReadLogChunks(ctx context.Context, js OrderedConsumers, job uuid.UUID, follow bool, done func() bool, fn func(LogChunk) error) error {
	c, err := js.OrderedConsumer(ctx, StreamLogs, jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{JobLogsSubject(job.String())},
	})
	if err != nil {
		return fmt.Errorf("reading logs of job %s: %w", job, err)
	}
	for {
		batch, err := c.Fetch(500, jetstream.FetchMaxWait(time.Second))
		if err != nil {
			return err
		}
		n := 0
		for msg := range batch.Messages() {
			n++
			attempt, _ := strconv.Atoi(msg.Headers().Get(HeaderAttempt))
			if err := fn(LogChunk{Attempt: attempt, Stream: msg.Headers().Get(HeaderStream), Data: msg.Data()}); err != nil {
				return err
			}
			if meta, err := msg.Metadata(); err == nil && meta.NumPending == 0 && !follow {
				return nil
			}
		}
		if err := batch.Error(); err != nil && !errors.Is(err, nats.ErrTimeout) {
			return err
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if n == 0 && (!follow || (done != nil && done())) {
			return nil
		}
	}
}

// TailLogs returns the last n lines of a job's stored output.
func TailLogs(ctx context.Context, js OrderedConsumers, job uuid.UUID, n int) ([]string, error) {
	t := &lineTail{max: n}
	if err := ReadLogs(ctx, js, job, t, false, nil); err != nil {
		return nil, err
	}
	if t.partial != "" {
		t.push(t.partial)
	}
	return t.lines, nil
}

// lineTail keeps the last max lines written to it.
type lineTail struct {
	max     int
	lines   []string
	partial string
}

func (t *lineTail) Write(p []byte) (int, error) {
	s := t.partial + string(p)
	for {
		i := strings.IndexByte(s, '\n')
		if i < 0 {
			break
		}
		t.push(s[:i])
		s = s[i+1:]
	}
	t.partial = s
	return len(p), nil
}

func (t *lineTail) push(line string) {
	t.lines = append(t.lines, line)
	if len(t.lines) > t.max {
		t.lines = t.lines[len(t.lines)-t.max:]
	}
}
