package notice

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/gpuq/gpuq/adapters"
)

// The IMDSv2 paths and headers the AWS watcher uses, as EC2's instance
// metadata documentation gives them.
const (
	awsTokenPath     = "/latest/api/token"
	awsActionPath    = "/latest/meta-data/spot/instance-action"
	awsRebalancePath = "/latest/meta-data/events/recommendations/rebalance"
	awsTTLHeader     = "X-aws-ec2-metadata-token-ttl-seconds"
	awsTokenHeader   = "X-aws-ec2-metadata-token"
	// awsTokenTTL is the session token's lifetime in seconds (the maximum
	// IMDSv2 allows is 21600); the watcher renews it well before.
	awsTokenTTL = 21600
)

// awsWatcher polls the spot instance-action item (404 until EC2 schedules
// an interruption) and the rebalance recommendation item.
type awsWatcher struct {
	cfg Config

	mu       sync.Mutex
	token    string
	tokenExp time.Time
}

// awsInstanceAction is the body of spot/instance-action.
type awsInstanceAction struct {
	Action string `json:"action"` // terminate, stop or hibernate
	Time   string `json:"time"`   // RFC 3339, UTC
}

// awsRebalance is the body of events/recommendations/rebalance.
type awsRebalance struct {
	NoticeTime string `json:"noticeTime"`
}

func (w *awsWatcher) Watch(ctx context.Context) (*Notice, error) {
	warned := false
	failing := false
	for {
		n, err := w.poll(ctx, &warned)
		switch {
		case err == nil:
			return n, nil
		case ctx.Err() != nil:
			return nil, ctx.Err()
		case err != errNotYet && !failing:
			// Logged once per outage, not once per poll.
			w.cfg.Logger.Warn("reading the AWS spot interruption notice", "err", err)
			failing = true
		case err == errNotYet:
			failing = false
		}
		if err := sleep(ctx, w.cfg.Poll); err != nil {
			return nil, err
		}
	}
}

func (w *awsWatcher) poll(ctx context.Context, warned *bool) (*Notice, error) {
	body, err := w.get(ctx, awsActionPath)
	if err == nil {
		var a awsInstanceAction
		if err := json.Unmarshal(body, &a); err != nil {
			return nil, fmt.Errorf("%s: %w", awsActionPath, err)
		}
		n := &Notice{Notice: adapters.Notice{Kind: adapters.NoticePreempt, Source: AWS, Reason: "AWS spot interruption: " + a.Action}, Received: time.Now()}
		if t, err := time.Parse(time.RFC3339, a.Time); err == nil {
			n.Deadline = t
			n.Reason += " at " + t.UTC().Format(time.RFC3339)
		}
		return n, nil
	}
	if err != errNotYet {
		return nil, err
	}
	if !*warned {
		body, err := w.get(ctx, awsRebalancePath)
		if err == nil {
			var r awsRebalance
			json.Unmarshal(body, &r) //nolint:errcheck // the warning stands without its time
			at, _ := time.Parse(time.RFC3339, r.NoticeTime)
			*warned = true
			w.cfg.OnWarning(Warning{Source: AWS, Reason: "AWS rebalance recommendation: elevated risk of spot interruption", At: at})
		} else if err != errNotYet {
			return nil, err
		}
	}
	return nil, errNotYet
}

// get reads one metadata item with a session token; 404 is errNotYet. A
// 401 means the token expired: it is renewed and the read retried once.
func (w *awsWatcher) get(ctx context.Context, path string) ([]byte, error) {
	for try := 0; ; try++ {
		token, err := w.sessionToken(ctx)
		if err != nil {
			return nil, err
		}
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, w.cfg.Endpoint+path, nil)
		if err != nil {
			return nil, err
		}
		req.Header.Set(awsTokenHeader, token)
		resp, err := w.cfg.Client.Do(req)
		if err != nil {
			return nil, err
		}
		body, err := io.ReadAll(io.LimitReader(resp.Body, maxBody))
		resp.Body.Close()
		if err != nil {
			return nil, err
		}
		switch {
		case resp.StatusCode == http.StatusOK:
			return body, nil
		case resp.StatusCode == http.StatusNotFound:
			return nil, errNotYet
		case resp.StatusCode == http.StatusUnauthorized && try == 0:
			w.mu.Lock()
			w.token = ""
			w.mu.Unlock()
			continue
		}
		return nil, fmt.Errorf("GET %s: %s: %s", path, resp.Status, strings.TrimSpace(string(body)))
	}
}

// sessionToken returns a live IMDSv2 session token, asking for a new one
// (PUT /latest/api/token) when there is none or it nears expiry.
func (w *awsWatcher) sessionToken(ctx context.Context) (string, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.token != "" && time.Now().Before(w.tokenExp) {
		return w.token, nil
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPut, w.cfg.Endpoint+awsTokenPath, nil)
	if err != nil {
		return "", err
	}
	req.Header.Set(awsTTLHeader, fmt.Sprint(awsTokenTTL))
	resp, err := w.cfg.Client.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxBody))
	if err != nil {
		return "", err
	}
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("PUT %s: %s", awsTokenPath, resp.Status)
	}
	w.token = strings.TrimSpace(string(body))
	// Renewed at half its lifetime, so a token never expires mid-read.
	w.tokenExp = time.Now().Add(awsTokenTTL * time.Second / 2)
	return w.token, nil
}
