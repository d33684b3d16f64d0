package workers

import (
	"bytes"
	"strings"
	"sync"
	"testing"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// chunkRecorder keeps what a logShipper publishes.
type chunkRecorder struct {
	mu   sync.Mutex
	data bytes.Buffer
}

func (r *chunkRecorder) PublishMsgAsync(msg *nats.Msg, _ ...jetstream.PublishOpt) (jetstream.PubAckFuture, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.data.Write(msg.Data)
	return nil, nil
}

func (r *chunkRecorder) PublishAsyncComplete() <-chan struct{} {
	done := make(chan struct{})
	close(done)
	return done
}

// A job's output is published with each of its secrets' values masked:
// a value of one line wherever it appears, each line of a value of several
// (a key file, printed line by line), a longer value before a shorter one
// it holds; a value too short to tell from ordinary output is left.
func TestAJobsOutputIsPublishedWithItsSecretsMasked(t *testing.T) {
	rec := &chunkRecorder{}
	s := newLogShipper(rec, "p", uuid.New(), 1)
	pem := "-----BEGIN KEY-----\nMIIEvQIBADANBgkqhkiG9w0B\n-----END KEY-----\n"
	s.mask([]string{"sk-live-123", "sk-live-123456", pem, "ab"})
	out, errOut := s.writer("stdout"), s.writer("stderr")
	// Each line in a chunk of its own, as a job printing slowly has it.
	for _, line := range []string{"token sk-live-123456 and sk-live-123\n", "-----BEGIN KEY-----\n", "MIIEvQIBADANBgkqhkiG9w0B\n", "-----END KEY-----\n", "grab the cab\n"} {
		if _, err := out.Write([]byte(line)); err != nil {
			t.Fatal(err)
		}
		s.flush(false)
	}
	// The whole value in one chunk.
	out.Write([]byte("key:\n" + pem))                      //nolint:errcheck // a recorder
	errOut.Write([]byte("Traceback: bad key sk-live-123")) //nolint:errcheck // a recorder
	s.close()
	got := rec.data.String()
	for _, leaked := range []string{"sk-live", "MIIEvQIBADANBgkqhkiG9w0B", "BEGIN KEY"} {
		if strings.Contains(got, leaked) {
			t.Fatalf("published output holds %q:\n%s", leaked, got)
		}
	}
	for _, want := range []string{"token *** and ***\n", "***\n***\n***\ngrab the cab\n", "key:\n***\n", "Traceback: bad key ***\n"} {
		if !strings.Contains(got, want) {
			t.Fatalf("published output: want %q, got\n%s", want, got)
		}
	}
}
