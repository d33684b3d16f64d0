package notice

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/gpuq/gpuq/adapters"
)

// Azure Instance Metadata Service paths, version and timings, as the
// Scheduled Events documentation gives them.
const (
	azureEventsPath  = "/metadata/scheduledevents"
	azureNamePath    = "/metadata/instance/compute/name"
	azureAPIVersion  = "2020-07-01"
	azureIMDSVersion = "2021-02-01"
)

// azureDocument is a Scheduled Events document.
type azureDocument struct {
	DocumentIncarnation int          `json:"DocumentIncarnation"`
	Events              []azureEvent `json:"Events"`
}

type azureEvent struct {
	EventID           string   `json:"EventId"`
	EventType         string   `json:"EventType"` // Freeze, Reboot, Redeploy, Preempt, Terminate
	ResourceType      string   `json:"ResourceType"`
	Resources         []string `json:"Resources"`
	EventStatus       string   `json:"EventStatus"` // Scheduled, Started
	NotBefore         string   `json:"NotBefore"`   // RFC 1123, empty once started
	Description       string   `json:"Description"`
	EventSource       string   `json:"EventSource"`
	DurationInSeconds int      `json:"DurationInSeconds"`
}

// azureStart is the body that acknowledges events.
type azureStart struct {
	StartRequests []azureStartRequest `json:"StartRequests"`
}

type azureStartRequest struct {
	EventID string `json:"EventId"`
}

// azureWatcher polls Scheduled Events for a Preempt (or Terminate) event
// naming this VM, and acknowledges it when the worker has handed back.
type azureWatcher struct {
	cfg  Config
	name string
}

func (w *azureWatcher) Watch(ctx context.Context) (*Notice, error) {
	warned := map[string]bool{}
	failing := false
	for {
		n, err := w.poll(ctx, warned)
		switch {
		case err == nil:
			return n, nil
		case ctx.Err() != nil:
			return nil, ctx.Err()
		case err != errNotYet && !failing:
			w.cfg.Logger.Warn("reading Azure Scheduled Events", "err", err)
			failing = true
		case err == errNotYet:
			failing = false
		}
		if err := sleep(ctx, w.cfg.Poll); err != nil {
			return nil, err
		}
	}
}

func (w *azureWatcher) poll(ctx context.Context, warned map[string]bool) (*Notice, error) {
	if w.name == "" {
		// Events of an availability set reach every VM in it; Resources
		// says which VMs each one affects.
		name, err := w.get(ctx, azureNamePath+"?api-version="+azureIMDSVersion+"&format=text")
		if err != nil {
			return nil, fmt.Errorf("reading the VM name: %w", err)
		}
		w.name = strings.TrimSpace(string(name))
		if w.name == "" {
			return nil, fmt.Errorf("reading the VM name: empty")
		}
	}
	body, err := w.get(ctx, azureEventsPath+"?api-version="+azureAPIVersion)
	if err != nil {
		return nil, err
	}
	var doc azureDocument
	if err := json.Unmarshal(body, &doc); err != nil {
		return nil, fmt.Errorf("%s: %w", azureEventsPath, err)
	}
	now := time.Now()
	for _, ev := range doc.Events {
		if ev.ResourceType != "" && ev.ResourceType != "VirtualMachine" || !slices.Contains(ev.Resources, w.name) {
			continue
		}
		at := now
		if t, err := time.Parse(time.RFC1123, ev.NotBefore); err == nil {
			at = t
		}
		switch ev.EventType {
		case "Preempt", "Terminate":
			if ev.NotBefore == "" {
				at = now.Add(Azure.DefaultGrace())
			}
			id := ev.EventID
			kind := adapters.NoticePreempt
			if ev.EventType == "Terminate" {
				kind = adapters.NoticeMaintenance
			}
			return &Notice{Received: now, Notice: adapters.Notice{Kind: kind, Source: Azure, Deadline: at,
				Reason: fmt.Sprintf("Azure scheduled event %s (%s, %s)", ev.EventType, ev.EventSource, ev.EventStatus)},
				ack: func(ctx context.Context) error { return w.start(ctx, id) }}, nil
		default:
			if !warned[ev.EventID] {
				warned[ev.EventID] = true
				w.cfg.OnWarning(Warning{Source: Azure, Reason: "Azure scheduled event " + ev.EventType, At: at})
			}
		}
	}
	return nil, errNotYet
}

// start acknowledges an event, so that Azure proceeds without waiting for
// NotBefore.
func (w *azureWatcher) start(ctx context.Context, id string) error {
	body, err := json.Marshal(azureStart{StartRequests: []azureStartRequest{{EventID: id}}})
	if err != nil {
		return err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, w.cfg.Endpoint+azureEventsPath+"?api-version="+azureAPIVersion, bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Metadata", "true")
	req.Header.Set("Content-Type", "application/json")
	resp, err := w.cfg.Client.Do(req)
	if err != nil {
		return fmt.Errorf("acknowledging scheduled event %s: %w", id, err)
	}
	defer resp.Body.Close()
	io.Copy(io.Discard, io.LimitReader(resp.Body, maxBody)) //nolint:errcheck // draining
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("acknowledging scheduled event %s: %s", id, resp.Status)
	}
	return nil
}

func (w *azureWatcher) get(ctx context.Context, pathQuery string) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, w.cfg.Endpoint+pathQuery, nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Metadata", "true")
	resp, err := w.cfg.Client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxBody))
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s: %s: %s", strings.SplitN(pathQuery, "?", 2)[0], resp.Status, strings.TrimSpace(string(body)))
	}
	return body, nil
}
