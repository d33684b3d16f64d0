package queue

import (
	"fmt"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/google/uuid"
)

// Notify asks the control plane to post the job's end to a webhook: a
// chat's incoming webhook (Slack, Mattermost, Google Chat, Rocket.Chat read
// the body's text) or any service taking JSON.
type Notify struct {
	// Webhook names a secret of the job's project that holds the URL: a
	// webhook's URL is a credential (whoever holds it posts to the channel),
	// so it is never part of a spec.
	Webhook string `json:"webhook"`
	// When lists the ends posted; empty posts every end. (Not "on": YAML
	// reads that key as true.)
	When []JobState `json:"when,omitempty"`
	// LogLines is how many of the job's last lines of output the post
	// carries, 0 (the default) to MaxNotifyLogLines. The output leaves
	// gpuq for the webhook's service, wherever that is: it is sent only
	// when asked for, and never for a job placed under a residency (see
	// OutputBoundTo).
	LogLines int `json:"log_lines,omitempty"`
}

// MaxNotifyLogLines bounds Notify.LogLines.
const MaxNotifyLogLines = 50

// MaxNotifyLogLine bounds each line of output a post carries, in bytes;
// a longer one is cut, ending in "…".
const MaxNotifyLogLine = 500

// Wants reports whether an end in state s is posted.
func (n *Notify) Wants(s JobState) bool {
	return n != nil && (len(n.When) == 0 || slices.Contains(n.When, s))
}

// validate appends n's problems, located under spec.notify.
func (n *Notify) validate(s *Spec, bad func(field, format string, args ...any)) {
	if n == nil {
		return
	}
	if n.Webhook == "" {
		bad("spec.notify.webhook", "must name a secret of the project holding the webhook's URL (gpuq secret set --project %s NAME)", s.Project)
	} else if err := ValidateSecretName(n.Webhook); err != nil {
		bad("spec.notify.webhook", "%v", err)
	}
	if n.LogLines < 0 || n.LogLines > MaxNotifyLogLines {
		bad("spec.notify.log_lines", "must be 0–%d, got %d", MaxNotifyLogLines, n.LogLines)
	} else if r := s.Placement.Residency; n.LogLines > 0 && r != "" {
		bad("spec.notify.log_lines", "the job is kept in residency %s (spec.placement.residency), and its output would leave it for the webhook's service, wherever that runs: leave log_lines out (the post still says how the job ended)", r)
	}
	if len(n.When) > len(endNames) {
		bad("spec.notify.when", "must name at most the %d ends (%s), got %d", len(endNames), strings.Join(endNames, ", "), len(n.When))
		return
	}
	for i, st := range n.When {
		field := fmt.Sprintf("spec.notify.when[%d]", i)
		switch {
		case !st.Terminal():
			bad(field, "must be an end: one of %s, got %.40q", strings.Join(endNames, ", "), st)
		case slices.Index(n.When, st) < i:
			bad(field, "%s is named twice", st)
		}
	}
}

var endNames = []string{string(StateSucceeded), string(StateFailed), string(StateDead), string(StateCancelled), string(StateRejected)}

// NamedSecrets returns every secret the spec names, each once: those the
// job receives (spec.secrets) and the webhook it is notified through.
func (s *Spec) NamedSecrets() []string {
	if s.Notify == nil || s.Notify.Webhook == "" || slices.Contains(s.Secrets, s.Notify.Webhook) {
		return s.Secrets
	}
	return append(slices.Clip(s.Secrets), s.Notify.Webhook)
}

// Notification outcomes.
const (
	NotifyPending   = "pending"   // tried, and tried again at NextAt
	NotifyDelivered = "delivered" // the webhook answered 2xx
	NotifyFailed    = "failed"    // given up on: Error says why
)

// Notification is the delivery of one end of a job to its webhook.
type Notification struct {
	// State and EndedAt name the end.
	State   JobState  `json:"state"`
	EndedAt time.Time `json:"ended_at"`
	// Outcome is pending, delivered or failed.
	Outcome string `json:"outcome"`
	Tries   int    `json:"tries"`
	// LastAt is the latest try; NextAt the next one, while pending.
	LastAt *time.Time `json:"last_at,omitempty"`
	NextAt *time.Time `json:"next_at,omitempty"`
	// HTTPStatus is the webhook's last answer; 0 when none came.
	HTTPStatus int `json:"http_status,omitempty"`
	// Error says why the last try failed.
	Error string `json:"error,omitempty"`
}

// NotificationBody is what a webhook receives: a line for people in text,
// and the job's end for programs.
type NotificationBody struct {
	Text string      `json:"text"`
	Job  NotifiedJob `json:"job"`
}

// NotifiedJob is a job's end as posted.
type NotifiedJob struct {
	ID          uuid.UUID         `json:"id"`
	Name        string            `json:"name"`
	Project     string            `json:"project"`
	State       JobState          `json:"state"`
	ExitCode    *int              `json:"exit_code,omitempty"`
	Reason      string            `json:"reason,omitempty"`
	Attempts    int               `json:"attempts"`
	Errors      int               `json:"errors"`
	Preemptions int               `json:"preemptions"`
	Labels      map[string]string `json:"labels,omitempty"`
	SubmittedAt time.Time         `json:"submitted_at"`
	EndedAt     time.Time         `json:"ended_at"`
	// Spent is what its attempts cost, one amount per currency.
	Spent []string `json:"spent,omitempty"`
	// LastLogLines are the job's last lines of output, when its spec's
	// notify.log_lines asks for them.
	LastLogLines []string `json:"last_log_lines,omitempty"`
	// OutputWithheld says why the lines notify.log_lines asks for are not
	// posted: the job was placed under a residency.
	OutputWithheld string `json:"output_withheld,omitempty"`
}

// OutputBoundTo names what keeps a job's output where it runs: the
// residency its placement binds it to (its class, or else its countries),
// "" when none does. Such a job's lines of output are not posted to a
// webhook, whose service may be anywhere: an organisation's residency
// rule holds for the job's output as for its data.
func OutputBoundTo(class string, countries []string) string {
	switch {
	case class != "":
		return "residency " + class
	case len(countries) > 0:
		return "countries " + strings.Join(countries, " ")
	}
	return ""
}

// Summary is the body's text: the job, how it ended and why.
func (j NotifiedJob) Summary() string {
	name := j.Name
	if name == "" {
		name = j.ID.String()
	} else {
		name += " (" + j.ID.String() + ")"
	}
	s := fmt.Sprintf("gpuq: job %s of project %s %s", name, j.Project, j.State)
	switch {
	case j.State == StateSucceeded:
	case j.ExitCode != nil && j.Reason == "":
		s += fmt.Sprintf(": exited with status %d", *j.ExitCode)
	case j.Reason != "":
		s += ": " + j.Reason
	}
	s += fmt.Sprintf(" after %d attempt(s), %s", j.Attempts, j.EndedAt.Sub(j.SubmittedAt).Round(time.Second))
	if len(j.Spent) > 0 {
		s += ", " + strings.Join(j.Spent, " + ")
	}
	if j.OutputWithheld != "" {
		s += "\n(" + j.OutputWithheld + ")"
	}
	if len(j.LastLogLines) > 0 {
		// A block chats show as it is; a fence inside would end it.
		s += "\n```\n" + strings.ReplaceAll(strings.Join(j.LastLogLines, "\n"), "```", "'''") + "\n```"
	}
	return s
}

// NotifyLogLine is line as a post carries it: valid UTF-8, at most
// MaxNotifyLogLine bytes.
func NotifyLogLine(line string) string {
	line = strings.ToValidUTF8(strings.TrimRight(line, "\r"), "\uFFFD")
	if len(line) <= MaxNotifyLogLine {
		return line
	}
	cut := MaxNotifyLogLine - len("…")
	for cut > 0 && !utf8.RuneStart(line[cut]) {
		cut--
	}
	return line[:cut] + "…"
}

// DueNotification is an end whose delivery is due, with its tries so far.
type DueNotification struct {
	Job    NotifiedJob
	Notify Notify
	Tries  int
}

// WebhookTest is the outcome of a test post to the webhook a project's
// secret holds (gpuq secret test-webhook, POST
// /v1/projects/{project}/webhooks/{name}/test).
type WebhookTest struct {
	Project string `json:"project"`
	Secret  string `json:"secret"`
	// Host is the webhook's host; never its path, which is the
	// credential.
	Host       string `json:"host,omitempty"`
	Delivered  bool   `json:"delivered"`
	HTTPStatus int    `json:"http_status,omitempty"`
	// Error says why the post failed.
	Error string `json:"error,omitempty"`
}

// WebhookTestBody is what a webhook receives from a test post: a line for
// people, and test true for programs, which find no job in it.
type WebhookTestBody struct {
	Text string `json:"text"`
	Test bool   `json:"test"`
}
