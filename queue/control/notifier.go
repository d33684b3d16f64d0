package control

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
	"unicode"

	"github.com/google/uuid"

	"github.com/gpuq/gpuq/queue"
)

// NotifierStore is what the notifier needs from the system of record.
type NotifierStore interface {
	NotificationsDue(ctx context.Context, limit int) ([]queue.DueNotification, error)
	NotificationTried(ctx context.Context, job uuid.UUID, endedAt time.Time, outcome string, next *time.Time, status int, why string) error
	NotificationSkipped(ctx context.Context, job uuid.UUID, endedAt time.Time) error
	SecretValues(ctx context.Context, project string, names []string) (map[string]string, error)
	JobSpend(ctx context.Context, job uuid.UUID) (map[string]int64, error)
	LatestPlacement(ctx context.Context, id uuid.UUID) (*queue.Placement, error)
}

// Notifier posts the ends of jobs whose spec asks for it (spec.notify) to
// the webhook whose URL the named project secret holds. An end is recorded
// in PostgreSQL with the job's final state, so none is lost to a server
// dying; it is posted at least once (a server dying between the webhook's
// answer and its record posts it again: the X-Gpuq-Delivery header is the
// same each time). A failed try is tried again with a doubling delay, up to
// Tries; an answer that trying again cannot change (a 4xx other than 408 and
// 429, a redirect, a URL that is not http(s), an address refused) ends it at
// once. Every outcome is shown by `gpuq status`. Run it on one server
// (Leader).
type Notifier struct {
	Store NotifierStore
	// Logger; default slog.Default().
	Logger *slog.Logger
	// Interval between looks for ends to post. Default 1s.
	Interval time.Duration
	// Timeout bounds one post, connection included. Default 10s.
	Timeout time.Duration
	// Tries is how often an end is tried before it is given up on.
	// Default 10.
	Tries int
	// Backoff is the delay after a first failed try, doubled after each
	// one up to MaxBackoff. Defaults 5s and 10m: ten tries span about half
	// an hour.
	Backoff, MaxBackoff time.Duration
	// Parallel bounds the posts in flight. Default 8.
	Parallel int
	// AllowPrivateAddresses lets a webhook's host be a loopback, private,
	// link-local or otherwise internal address. Off, such an address is
	// refused when it is dialled, whatever name resolved to it, so that a
	// project's admin cannot make the control plane post into its own
	// network (a metadata server, an internal service).
	AllowPrivateAddresses bool
	// UserAgent is sent with each post. Default "gpuq".
	UserAgent string
	// Client posts; default one built from the settings above, which
	// follows no redirect and uses no proxy.
	Client *http.Client
	// Metrics, when set, counts the tries by outcome.
	Metrics *Metrics
	// JS reads a job's last lines of output for a spec whose
	// notify.log_lines asks for them; without it none are sent.
	JS queue.OrderedConsumers
}

// WithDefaults returns n with every unset default filled in.
func (n Notifier) WithDefaults() Notifier {
	if n.Logger == nil {
		n.Logger = slog.Default()
	}
	if n.Interval == 0 {
		n.Interval = time.Second
	}
	if n.Timeout == 0 {
		n.Timeout = 10 * time.Second
	}
	if n.Tries == 0 {
		n.Tries = 10
	}
	if n.Backoff == 0 {
		n.Backoff = 5 * time.Second
	}
	if n.MaxBackoff == 0 {
		n.MaxBackoff = 10 * time.Minute
	}
	if n.Parallel == 0 {
		n.Parallel = 8
	}
	if n.UserAgent == "" {
		n.UserAgent = "gpuq"
	}
	if n.Client == nil {
		n.Client = webhookClient(n.Timeout, n.AllowPrivateAddresses)
	}
	return n
}

// Validate checks the settings, named by their config keys.
func (n Notifier) Validate() error {
	switch {
	case n.Interval < 0:
		return fmt.Errorf("notifications.interval: must not be negative, got %s", n.Interval)
	case n.Timeout < 0 || n.Timeout > 5*time.Minute:
		return fmt.Errorf("notifications.timeout: must be at most 5m, got %s", n.Timeout)
	case n.Tries < 0 || n.Tries > 100:
		return fmt.Errorf("notifications.tries: must be 1–100, got %d", n.Tries)
	case n.Backoff < 0 || n.MaxBackoff < 0:
		return errors.New("notifications.backoff and max_backoff: must not be negative")
	case n.Parallel < 0 || n.Parallel > 256:
		return fmt.Errorf("notifications.parallel: must be 1–256, got %d", n.Parallel)
	}
	return nil
}

func (n Notifier) validate() error {
	if n.Store == nil {
		return errors.New("notifier.store: must be set")
	}
	return n.Validate()
}

// Run posts due ends every Interval until ctx ends.
func (n *Notifier) Run(ctx context.Context) error {
	cfg := n.WithDefaults()
	if err := cfg.validate(); err != nil {
		return err
	}
	every(ctx, cfg.Interval, func() {
		for ctx.Err() == nil {
			done, err := cfg.Pass(ctx)
			if err != nil && ctx.Err() == nil {
				cfg.Logger.Warn("posting job ends to webhooks", "err", err)
			}
			// A full page may have more behind it.
			if err != nil || done < cfg.Parallel*notifyPage {
				return
			}
		}
	})
	return nil
}

// notifyPage is how many ends per post in flight one look reads.
const notifyPage = 4

// Pass tries every due end once and returns how many it handled.
func (n *Notifier) Pass(ctx context.Context) (int, error) {
	cfg := n.WithDefaults()
	if err := cfg.validate(); err != nil {
		return 0, err
	}
	due, err := cfg.Store.NotificationsDue(ctx, cfg.Parallel*notifyPage)
	if err != nil || len(due) == 0 {
		return 0, err
	}
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		first error
	)
	slots := make(chan struct{}, cfg.Parallel)
	for _, d := range due {
		slots <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-slots; wg.Done() }()
			if err := cfg.deliver(ctx, d); err != nil {
				mu.Lock()
				first = cmp.Or(first, err)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return len(due), first
}

// deliver tries d once and records the outcome.
func (n *Notifier) deliver(ctx context.Context, d queue.DueNotification) error {
	j := d.Job
	if !d.Notify.Wants(j.State) {
		return n.Store.NotificationSkipped(ctx, j.ID, j.EndedAt)
	}
	status, err := n.post(ctx, d)
	tries := d.Tries + 1
	var (
		outcome = queue.NotifyDelivered
		next    *time.Time
		why     string
	)
	if err != nil {
		why = err.Error()
		var perm *permanentError
		permanent := errors.As(err, &perm)
		if permanent || tries >= n.Tries {
			outcome = queue.NotifyFailed
			if !permanent {
				why += fmt.Sprintf(" (gave up after %d tries)", tries)
			}
			n.Logger.Warn("gave up posting a job's end to its webhook", "job", j.ID, "project", j.Project, "state", j.State, "tries", tries, "err", why)
		} else {
			outcome = queue.NotifyPending
			at := time.Now().Add(n.delay(tries, err))
			next = &at
			n.Logger.Info("posting a job's end to its webhook failed; trying again", "job", j.ID, "project", j.Project, "tries", tries, "next", at.UTC(), "err", why)
		}
	}
	n.Metrics.NotificationTried(outcome)
	return n.Store.NotificationTried(ctx, j.ID, j.EndedAt, outcome, next, status, why)
}

// delay is the wait after the tries-th failed try: Backoff doubled per
// earlier failure, at most MaxBackoff, or the webhook's Retry-After when it
// asks for longer (up to MaxBackoff too).
func (n *Notifier) delay(tries int, err error) time.Duration {
	d := n.Backoff
	for i := 1; i < tries && d < n.MaxBackoff; i++ {
		d *= 2
	}
	var busy *retryAfterError
	if errors.As(err, &busy) && busy.after > d {
		d = busy.after
	}
	return min(d, n.MaxBackoff)
}

// DeliveryID names one end of a job; the X-Gpuq-Delivery header carries it,
// the same on every try, so that a receiver can drop a repeat.
func DeliveryID(job uuid.UUID, endedAt time.Time) string {
	return job.String() + "/" + endedAt.UTC().Format(time.RFC3339Nano)
}

// post posts d's end and returns the webhook's HTTP status (0 when none
// came). An error never holds the URL: its path and query are the
// credential.
func (n *Notifier) post(ctx context.Context, d queue.DueNotification) (int, error) {
	j := d.Job
	u, err := n.webhookURL(ctx, j.Project, d.Notify.Webhook)
	if errors.Is(err, queue.ErrSecretMissing) {
		return 0, fmt.Errorf("secret %s, which spec.notify.webhook names, is not set for project %s (deleted since the job was submitted): gpuq secret set --project %[2]s %[1]s", d.Notify.Webhook, j.Project)
	}
	if err != nil {
		return 0, err
	}
	spent, err := n.Store.JobSpend(ctx, j.ID)
	if err != nil {
		return 0, err
	}
	j.Spent = amounts(spent)
	if k := d.Notify.LogLines; k > 0 && n.JS != nil {
		lines, withheld, err := n.lastLines(ctx, j.ID, k)
		if err != nil {
			return 0, err
		}
		j.LastLogLines, j.OutputWithheld = lines, withheld
	}
	body, err := json.Marshal(queue.NotificationBody{Text: j.Summary(), Job: j})
	if err != nil {
		return 0, err
	}
	return n.send(ctx, u, d.Notify.Webhook, j.Project, body, DeliveryID(j.ID, j.EndedAt))
}

// TestPost posts a test message to the webhook whose URL secret name of
// project holds, as a job's end would be posted: the same addresses
// allowed, the same timeout, no redirect followed; by says who asked for
// it. A secret that is not set is queue.ErrSecretMissing; the webhook's
// failure is in the result, never holding the URL.
func (n *Notifier) TestPost(ctx context.Context, project, name, by string) (*queue.WebhookTest, error) {
	cfg := n.WithDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	res := &queue.WebhookTest{Project: project, Secret: name}
	u, err := cfg.webhookURL(ctx, project, name)
	var notURL *permanentError
	switch {
	case errors.As(err, &notURL):
		res.Error = err.Error()
		return res, nil
	case err != nil:
		return nil, err
	}
	res.Host = u.Hostname()
	body, err := json.Marshal(queue.WebhookTestBody{Test: true, Text: fmt.Sprintf(
		"gpuq: a test post to webhook %s of project %s, asked for by %s: the ends of jobs naming it in notify.webhook are posted here", name, project, by)})
	if err != nil {
		return nil, err
	}
	res.HTTPStatus, err = cfg.send(ctx, u, name, project, body, "test/"+uuid.NewString())
	res.Delivered = err == nil
	if err != nil {
		res.Error = err.Error()
	}
	return res, nil
}

// webhookURL reads the URL secret name of project holds
// (queue.ErrSecretMissing when it is not set).
func (n *Notifier) webhookURL(ctx context.Context, project, name string) (*url.URL, error) {
	values, err := n.Store.SecretValues(ctx, project, []string{name})
	if err != nil {
		return nil, err
	}
	u, err := url.Parse(strings.TrimSpace(values[name]))
	if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" {
		return nil, &permanentError{fmt.Errorf("secret %s of project %s does not hold an http:// or https:// URL with a host; set the webhook's URL in it", name, project)}
	}
	return u, nil
}

// send posts body to u, the URL secret name of project holds, and returns
// the webhook's HTTP status (0 when none came).
func (n *Notifier) send(ctx context.Context, u *url.URL, name, project string, body []byte, delivery string) (int, error) {
	host := u.Hostname()
	ctx, cancel := context.WithTimeout(ctx, n.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, u.String(), bytes.NewReader(body))
	if err != nil {
		return 0, &permanentError{fmt.Errorf("secret %s of project %s does not hold a URL gpuq can post to", name, project)}
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", n.UserAgent)
	req.Header.Set("X-Gpuq-Delivery", delivery)
	resp, err := n.Client.Do(req)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err // without the URL
		}
		var refused *refusedAddressError
		if errors.As(err, &refused) {
			return 0, &permanentError{fmt.Errorf("posting to %s: %w", host, refused)}
		}
		return 0, fmt.Errorf("posting to %s: %w", host, err)
	}
	defer resp.Body.Close()
	said := answerText(io.LimitReader(resp.Body, 512))
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10)) // lets the connection be reused
	code := resp.StatusCode
	what := fmt.Sprintf("posting to %s: HTTP %d", host, code)
	if said != "" {
		what += ": " + said
	}
	switch {
	case code >= 200 && code < 300:
		return code, nil
	case code >= 300 && code < 400:
		return code, &permanentError{fmt.Errorf("%s: the webhook redirects, and gpuq follows no redirect: set the URL it redirects to in secret %s", what, name)}
	case code == http.StatusTooManyRequests || code == http.StatusRequestTimeout || code >= 500:
		err := errors.New(what)
		if s, perr := strconv.Atoi(resp.Header.Get("Retry-After")); perr == nil && s > 0 {
			return code, &retryAfterError{err: err, after: time.Duration(s) * time.Second}
		}
		return code, err
	default:
		return code, &permanentError{errors.New(what)}
	}
}

// lastLines reads the job's last k lines of output for its post, or says
// why they are withheld: its latest placement keeps it in a residency
// (queue.OutputBoundTo; a job never placed is kept in none).
func (n *Notifier) lastLines(ctx context.Context, job uuid.UUID, k int) (lines []string, withheld string, err error) {
	pl, err := n.Store.LatestPlacement(ctx, job)
	switch {
	case err == nil:
		if bound := queue.OutputBoundTo(pl.Residency, pl.Countries); bound != "" {
			return nil, fmt.Sprintf("its last %d lines of output are not posted: the job is kept in %s", k, bound), nil
		}
	case !errors.Is(err, queue.ErrNotFound):
		return nil, "", fmt.Errorf("reading the job's placement: %w", err)
	}
	lines, err = queue.TailLogs(ctx, n.JS, job, k)
	if err != nil {
		return nil, "", fmt.Errorf("reading the job's last %d lines of output (notify.log_lines): %w", k, err)
	}
	for i, l := range lines {
		lines[i] = queue.NotifyLogLine(l)
	}
	return lines, "", nil
}

// answerText is the start of a webhook's answer, on one line of printable
// characters, for the error shown to the job's owner.
func answerText(r io.Reader) string {
	b, _ := io.ReadAll(r)
	s := strings.Map(func(r rune) rune {
		switch {
		case r == '\n' || r == '\r' || r == '\t':
			return ' '
		case !unicode.IsPrint(r):
			return -1
		}
		return r
	}, string(b))
	s = strings.Join(strings.Fields(s), " ")
	if len(s) > 200 {
		s = strings.ToValidUTF8(s[:200], "") + "…"
	}
	return s
}

// permanentError is a try whose failure trying again cannot change.
type permanentError struct{ err error }

func (e *permanentError) Error() string { return e.err.Error() }
func (e *permanentError) Unwrap() error { return e.err }

// retryAfterError is a failed try whose webhook asked to wait after.
type retryAfterError struct {
	err   error
	after time.Duration
}

func (e *retryAfterError) Error() string { return e.err.Error() }
func (e *retryAfterError) Unwrap() error { return e.err }

// refusedAddressError is a webhook address that is not public.
type refusedAddressError struct{ ip net.IP }

func (e *refusedAddressError) Error() string {
	return fmt.Sprintf("address %s is not a public one, and notifications.allow_private_addresses is off", e.ip)
}

// webhookClient posts with timeout, follows no redirect, uses no proxy and,
// unless allowPrivate, dials only public addresses.
func webhookClient(timeout time.Duration, allowPrivate bool) *http.Client {
	dialer := &net.Dialer{Timeout: timeout}
	if !allowPrivate {
		dialer.Control = func(_, address string, _ syscall.RawConn) error {
			host, _, err := net.SplitHostPort(address)
			if err != nil {
				return err
			}
			if ip := net.ParseIP(host); ip == nil || !PublicAddress(ip) {
				return &refusedAddressError{ip: ip}
			}
			return nil
		}
	}
	return &http.Client{
		Timeout: timeout,
		Transport: &http.Transport{
			Proxy:                 nil,
			DialContext:           dialer.DialContext,
			TLSHandshakeTimeout:   timeout,
			ResponseHeaderTimeout: timeout,
			MaxIdleConnsPerHost:   4,
			IdleConnTimeout:       90 * time.Second,
		},
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
}

// sharedAddressSpace is 100.64.0.0/10 (RFC 6598: carrier-grade NAT, and
// some clouds' internal services).
var sharedAddressSpace = &net.IPNet{IP: net.IPv4(100, 64, 0, 0), Mask: net.CIDRMask(10, 32)}

// PublicAddress reports whether ip is an address a webhook may have with
// notifications.allow_private_addresses off: not loopback, private,
// link-local (the cloud metadata servers), multicast, unspecified or in
// 0.0.0.0/8 or 100.64.0.0/10.
func PublicAddress(ip net.IP) bool {
	if v4 := ip.To4(); v4 != nil {
		ip = v4
		if v4[0] == 0 || sharedAddressSpace.Contains(v4) || v4.Equal(net.IPv4bcast) {
			return false
		}
	}
	return !(ip.IsLoopback() || ip.IsPrivate() || ip.IsLinkLocalUnicast() || ip.IsLinkLocalMulticast() ||
		ip.IsInterfaceLocalMulticast() || ip.IsMulticast() || ip.IsUnspecified())
}
