package httpapi

import (
	"context"
	"encoding/json"
	"net/http"
	"time"

	"github.com/danielgtaylor/huma/v2"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/gpuq/gpuq/queue"
	"github.com/gpuq/gpuq/queue/control"
)

// CapacityStore is what the capacity operations read: the instances billed
// in a window and the attempts that ran on them.
type CapacityStore interface {
	control.SpendStore
}

// SpendReport is what the rented instances cost since a time, per
// instance, pool and project, idle separate (`gpuq spend -o json`).
type SpendReport = control.SpendReport

type capacitySpendInput struct {
	Since string `query:"since" doc:"start of the period (RFC 3339); default: the start of the current month (UTC)"`
}

type instanceEventsInput struct {
	Pool        string `query:"pool" maxLength:"64" doc:"only instances of this pool"`
	LastEventID string `header:"Last-Event-ID" maxLength:"20" doc:"resume after this event (the stream sequence of the last event received); 0 for every retained event; without it only new events are sent"`
}

func (s *Server) registerCapacity(api huma.API) {
	register(api, huma.Operation{
		OperationID: "get-spend", Errors: []int{422}, Method: http.MethodGet, Path: "/v1/spend", Tags: []string{"admin"},
		Summary:     "What the rented instances cost since a time, per instance, pool and project, idle separate (admin)",
		Description: "Prices every instance billed in the window from its billed time (rounded up to its provider's billing unit) at its price, and attributes it to the jobs that ran on it; what no job used is idle. The same document as `gpuq spend -o json`.",
		Metadata:    map[string]any{metaRole: queue.RoleAdmin},
	}, s.capacitySpend)
	register(api, huma.Operation{
		OperationID: "get-instance-events", Errors: []int{422}, Method: http.MethodGet, Path: "/v1/instances/events", Tags: []string{"admin", "events"},
		Summary:     "Follow the state changes of the machines the autoscaler rents (Server-Sent Events, admin)",
		Description: "Sends each instance state change as it is announced on JetStream after its record commits, in order per instance. With Last-Event-ID, first the events after that one that are still retained (0: all of them).",
		Responses: map[string]*huma.Response{"200": {Description: "event stream", Content: map[string]*huma.MediaType{
			"text/event-stream": sseContent(api, map[string]any{"state": queue.InstanceEvent{}}),
		}}},
		Metadata: map[string]any{metaRole: queue.RoleAdmin},
	}, s.instanceEvents)
}

func (s *Server) capacitySpend(ctx context.Context, in *capacitySpendInput) (*struct{ Body *SpendReport }, error) {
	now := time.Now().UTC()
	since, err := sinceOrMonthStart(in.Since, now)
	if err != nil {
		return nil, err
	}
	if since.After(now) {
		return nil, fieldProblem("query.since", "must not be in the future, got %s", in.Since)
	}
	r, err := control.Spend(ctx, s.cfg.Store, since, now)
	if err != nil {
		return nil, internal(s.cfg.Logger, "reading spend", err)
	}
	return &struct{ Body *SpendReport }{Body: r}, nil
}

func (s *Server) instanceEvents(ctx context.Context, in *instanceEventsInput) (*huma.StreamResponse, error) {
	if in.Pool != "" {
		if err := queue.ValidatePool(in.Pool); err != nil {
			return nil, fieldProblem("query.pool", "must be 1–64 letters, digits, '-' or '_', got %q", in.Pool)
		}
	}
	after, err := resumeAfter(in.LastEventID)
	if err != nil {
		return nil, err
	}
	// Last-Event-ID 0 asks for every retained event; none, for new ones.
	c, err := s.consumerFrom(ctx, queue.StreamInstances, queue.PoolInstancesSubject(in.Pool), after, in.LastEventID == "")
	if err != nil {
		return nil, internal(s.cfg.Logger, "following instance events", err)
	}
	return &huma.StreamResponse{Body: func(hctx huma.Context) {
		w := newEventWriter(hctx)
		err := follow(hctx.Context(), c, keepAlive, func(msg jetstream.Msg) (bool, error) {
			var ev queue.InstanceEvent
			if err := json.Unmarshal(msg.Data(), &ev); err != nil {
				return true, nil
			}
			return true, w.send(seqOf(msg), "state", ev)
		}, func() (bool, error) { return true, w.comment("keep-alive") })
		s.streamEnded("instance events", err)
	}}, nil
}
