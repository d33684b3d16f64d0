package workers

import (
	"bytes"
	"io"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/gpuq/gpuq/queue"
)

// Log batching: a chunk is published when it reaches logChunkBytes or has
// waited logFlushEvery, so chatty jobs cost few messages and quiet ones are
// still followed live.
const (
	logChunkBytes = 32 << 10
	logFlushEvery = 200 * time.Millisecond
)

// logShipper publishes a job's stdout and stderr to gpuq.logs.<pool>.<job> in
// chunks of whole lines.
type logShipper struct {
	js      logPublisher
	pool    string
	job     uuid.UUID
	attempt int

	// masks are the job's secret values, longest first: replaced by
	// maskedText in what is published.
	masks [][]byte

	mu      sync.Mutex
	bufs    map[string]*bytes.Buffer
	stop    chan struct{}
	stopped chan struct{}
}

// logPublisher is the part of JetStream that ships log chunks.
type logPublisher interface {
	PublishMsgAsync(msg *nats.Msg, opts ...jetstream.PublishOpt) (jetstream.PubAckFuture, error)
	PublishAsyncComplete() <-chan struct{}
}

func newLogShipper(js logPublisher, pool string, job uuid.UUID, attempt int) *logShipper {
	s := &logShipper{js: js, pool: pool, job: job, attempt: attempt, bufs: map[string]*bytes.Buffer{},
		stop: make(chan struct{}), stopped: make(chan struct{})}
	go s.loop()
	return s
}

// maskedText replaces a secret's value in a job's output.
const maskedText = "***"

// minMasked is the shortest value, or line of a value, that is masked: a
// shorter one would mask ordinary output as often as the secret.
const minMasked = 4

// mask makes the shipper replace each of values in the output it publishes,
// and each line of a value of several lines, since output is published in
// chunks of whole lines. Call it before the first write.
func (s *logShipper) mask(values []string) {
	if len(values) == 0 {
		return
	}
	seen := map[string]bool{}
	for _, v := range values {
		for _, m := range append([]string{v}, strings.Split(v, "\n")...) {
			m = strings.TrimSpace(m)
			if len(m) >= minMasked && !seen[m] {
				seen[m] = true
				s.masks = append(s.masks, []byte(m))
			}
		}
	}
	slices.SortFunc(s.masks, func(a, b []byte) int { return len(b) - len(a) })
}

func (s *logShipper) writer(stream string) io.Writer {
	s.mu.Lock()
	s.bufs[stream] = &bytes.Buffer{}
	s.mu.Unlock()
	return &streamWriter{s: s, stream: stream}
}

type streamWriter struct {
	s      *logShipper
	stream string
}

func (w *streamWriter) Write(p []byte) (int, error) {
	w.s.mu.Lock()
	buf := w.s.bufs[w.stream]
	buf.Write(p)
	full := buf.Len() >= logChunkBytes
	w.s.mu.Unlock()
	if full {
		w.s.flush(false)
	}
	return len(p), nil
}

func (s *logShipper) loop() {
	defer close(s.stopped)
	t := time.NewTicker(logFlushEvery)
	defer t.Stop()
	for {
		select {
		case <-s.stop:
			s.flush(true)
			return
		case <-t.C:
			s.flush(false)
		}
	}
}

// flush publishes every complete line buffered so far (everything, at the
// end).
func (s *logShipper) flush(final bool) {
	s.mu.Lock()
	var chunks []queue.LogChunk
	for stream, buf := range s.bufs {
		data := buf.Bytes()
		end := len(data)
		if !final {
			end = bytes.LastIndexByte(data, '\n') + 1
			if end == 0 && len(data) >= logChunkBytes {
				end = len(data)
			}
		}
		if end == 0 {
			continue
		}
		chunk := make([]byte, end)
		copy(chunk, data[:end])
		if final && chunk[len(chunk)-1] != '\n' {
			chunk = append(chunk, '\n')
		}
		for _, m := range s.masks {
			chunk = bytes.ReplaceAll(chunk, m, []byte(maskedText))
		}
		buf.Next(end)
		chunks = append(chunks, queue.LogChunk{Attempt: s.attempt, Stream: stream, Data: chunk})
	}
	s.mu.Unlock()
	for _, c := range chunks {
		s.js.PublishMsgAsync(queue.NewLogMsg(s.pool, s.job, c)) //nolint:errcheck // logs are best effort; the job's result does not depend on them
	}
}

// close publishes what is left and waits briefly for the server to store it.
func (s *logShipper) close() {
	close(s.stop)
	<-s.stopped
	select {
	case <-s.js.PublishAsyncComplete():
	case <-time.After(5 * time.Second):
	}
}
