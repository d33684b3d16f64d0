package notice

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/gpuq/gpuq/adapters"
)

// Compute Engine metadata keys and timings, as its metadata server
// documentation gives them.
const (
	gcpPrefix         = "/computeMetadata/v1/instance/"
	gcpPreempted      = "preempted"
	gcpMaintenance    = "maintenance-event"
	gcpFlavorHeader   = "Metadata-Flavor"
	gcpFlavor         = "Google"
	gcpPreemptNotice  = 30 * time.Second // preemption: ACPI soft-off 30 s ahead
	gcpMaintainNotice = 60 * time.Second // maintenance-event changes 60 s ahead
	// gcpHang is how long one wait_for_change read may hang (timeout_sec).
	gcpHang = 60
)

// gcpWatcher waits on instance/preempted and instance/maintenance-event
// with wait_for_change, so a change arrives as soon as the server has it.
type gcpWatcher struct{ cfg Config }

func (w *gcpWatcher) Watch(ctx context.Context) (*Notice, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	found := make(chan *Notice, 2)
	for _, key := range []string{gcpPreempted, gcpMaintenance} {
		go func() {
			if n := w.watchKey(ctx, key); n != nil {
				found <- n
			}
		}()
	}
	select {
	case n := <-found:
		return n, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// watchKey follows one key until its value is a notice; it returns nil
// when ctx ends.
func (w *gcpWatcher) watchKey(ctx context.Context, key string) *Notice {
	etag, last, failing := "", "", false
	for ctx.Err() == nil {
		value, tag, err := w.read(ctx, key, etag)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			if !failing {
				w.cfg.Logger.Warn("reading GCP metadata", "key", key, "err", err)
				failing = true
			}
			etag = ""              // read the current value again, without waiting
			sleep(ctx, w.cfg.Poll) //nolint:errcheck // the loop checks ctx
			continue
		}
		failing = false
		etag = tag
		if tag == "" {
			// Without an ETag there is nothing to wait on: poll instead.
			sleep(ctx, w.cfg.Poll) //nolint:errcheck // the loop checks ctx
		}
		if value == last {
			continue
		}
		last = value
		now := time.Now()
		switch {
		case key == gcpPreempted && value == "TRUE":
			return &Notice{Received: now, Notice: adapters.Notice{Kind: adapters.NoticePreempt, Source: GCP,
				Deadline: now.Add(gcpPreemptNotice), Reason: "GCP preemption: instance/preempted is TRUE"}}
		case key == gcpMaintenance && strings.HasPrefix(value, "TERMINATE"):
			return &Notice{Received: now, Notice: adapters.Notice{Kind: adapters.NoticeMaintenance, Source: GCP,
				Deadline: now.Add(gcpMaintainNotice), Reason: "GCP host maintenance: " + value}}
		case key == gcpMaintenance && value != "NONE" && value != "":
			w.cfg.OnWarning(Warning{Source: GCP, Reason: "GCP host maintenance: " + value, At: now.Add(gcpMaintainNotice)})
		}
	}
	return nil
}

// read returns key's value and ETag; with etag set it waits for the value
// to change from that version (wait_for_change with last_etag), up to
// gcpHang seconds.
func (w *gcpWatcher) read(ctx context.Context, key, etag string) (value, tag string, err error) {
	u := w.cfg.Endpoint + gcpPrefix + key
	client := w.cfg.Client
	if etag != "" {
		u += "?" + url.Values{"wait_for_change": {"true"}, "last_etag": {etag}, "timeout_sec": {fmt.Sprint(gcpHang)}}.Encode()
		// A hanging read outlives the client's usual timeout.
		hang := *client
		hang.Timeout = (gcpHang + 15) * time.Second
		client = &hang
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return "", "", err
	}
	req.Header.Set(gcpFlavorHeader, gcpFlavor)
	resp, err := client.Do(req)
	if err != nil {
		return "", "", err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxBody))
	if err != nil {
		return "", "", err
	}
	if resp.StatusCode != http.StatusOK {
		return "", "", fmt.Errorf("GET %s: %s", gcpPrefix+key, resp.Status)
	}
	// The metadata server marks its answers; anything else (a proxy, a
	// captive portal) is not to be believed.
	if resp.Header.Get(gcpFlavorHeader) != gcpFlavor {
		return "", "", fmt.Errorf("GET %s: response lacks %s: %s", gcpPrefix+key, gcpFlavorHeader, gcpFlavor)
	}
	return strings.TrimSpace(string(body)), resp.Header.Get("ETag"), nil
}
