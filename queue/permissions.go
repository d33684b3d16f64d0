package queue

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	"github.com/google/uuid"
)

// The NATS roles of a deployment. Each is an allow list of the subjects its
// holder may publish and subscribe to; everything else is refused by the
// NATS server itself. The embedded server of `gpuq dev`, the demo and the
// tests grants exactly these, and deploy/nats/auth.conf is generated from
// them (`gpuq nats-auth`), so the two never drift.

// Role names, the first token of a credential's user name.
const (
	RoleControl   = "control"
	RoleWorker    = "worker"
	RoleSubmitter = "submitter"
)

// NATSRole is one credential's rights: the subjects it may publish to and
// subscribe to (NATS wildcards allowed). A nil Publish and Subscribe means
// everything: only the control plane holds such a credential.
type NATSRole struct {
	// Name is the NATS user name that carries the role (see RoleUser).
	Name      string
	Publish   []string
	Subscribe []string
}

// All reports whether the role may do everything.
func (r NATSRole) All() bool { return r.Publish == nil && r.Subscribe == nil }

// ControlRole is the control plane's: every subject, JetStream's API
// included.
func ControlRole() NATSRole { return NATSRole{Name: RoleControl} }

// ArchiveBucket names the object-store bucket holding the checkpoints and
// outputs of the jobs that ran on pool: gpuq-pool-<pool>. One bucket per
// pool, not per region: a bucket's chunks are named at random, so NATS
// permissions can scope reads to a bucket but not to a job, and a worker of
// one pool must not read the checkpoints of another's jobs. The bucket lies
// in the pool's region; a job re-placed onto another pool has its latest
// checkpoint copied into that pool's bucket by the control plane
// (WorkerOpRestore).
func ArchiveBucket(pool string) string {
	return ArchiveBucketPrefix + strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_' {
			return r
		}
		return '_'
	}, pool)
}

// ArchiveBucketPrefix starts the name of every pool's archive bucket.
const ArchiveBucketPrefix = "gpuq-pool-"

// ArchiveScheme starts the URI of every archive: nats-os://bucket/name.
const ArchiveScheme = "nats-os://"

// ArchiveJob is the job whose archive uri names: every checkpoint and output
// archive lies under jobs/<job>/ of its bucket (JobArchivePrefix). ok is
// false for any other URI.
func ArchiveJob(uri string) (job uuid.UUID, ok bool) {
	rest, found := strings.CutPrefix(uri, ArchiveScheme)
	if !found {
		return uuid.Nil, false
	}
	parts := strings.Split(rest, "/")
	if len(parts) != 4 || !strings.HasPrefix(parts[0], ArchiveBucketPrefix) || parts[1] != "jobs" || parts[3] == "" {
		return uuid.Nil, false
	}
	id, err := uuid.Parse(parts[2])
	if err != nil || id.String() != parts[2] {
		return uuid.Nil, false
	}
	return id, true
}

// JobArchivePrefix is how the URI of every checkpoint and output archive of
// job stored by pool begins: the pool's bucket, under jobs/<job>/.
func JobArchivePrefix(pool string, job uuid.UUID) string {
	return ArchiveScheme + ArchiveBucket(pool) + "/jobs/" + job.String() + "/"
}

// ClientInbox is the inbox prefix of a submitter of project.
func ClientInbox(project string) string { return "_INBOX.client." + project }

// WorkerRole is a worker's of pool in region: it calls the worker service of
// its pool, pulls from and acknowledges its pool's consumer only, writes the
// output of jobs under its pool's log subjects only, and reads and writes
// its pool's archive bucket only. It cannot submit, publish a run order or a
// cancel, read another pool, or read another pool's checkpoints, even of
// its own region: a job that comes from another pool has its checkpoint
// copied into this pool's bucket by the control plane.
func WorkerRole(pool, region string) NATSRole {
	cons := PoolConsumer(pool)
	obj := "OBJ_" + ArchiveBucket(pool)
	bucket := ArchiveBucket(pool)
	api := "$JS.API."
	r := NATSRole{
		Name: RoleUser(RoleWorker, pool, region),
		Publish: []string{
			"gpuq.svc.worker." + pool + ".>",
			LogSubject(pool, "*"),
			// The pool's consumer: looked up, created with its own filter
			// (the server checks the subject's filter against the
			// config), pulled from and acknowledged.
			api + "CONSUMER.INFO." + StreamRun + "." + cons,
			api + "CONSUMER.CREATE." + StreamRun + "." + cons + ".gpuq.run." + pool + ".*",
			api + "CONSUMER.MSG.NEXT." + StreamRun + "." + cons,
			"$JS.ACK." + StreamRun + "." + cons + ".>",
			"$JS.ACK.*.*." + StreamRun + "." + cons + ".>",
			// The pool's archive bucket: created if missing, objects
			// put (chunks, then metadata, purging a replaced object's
			// chunks), read through an ordered consumer, and deleted.
			api + "STREAM.INFO." + obj,
			api + "STREAM.CREATE." + obj,
			api + "STREAM.UPDATE." + obj,
			api + "STREAM.PURGE." + obj,
			api + "STREAM.MSG.GET." + obj,
			api + "DIRECT.GET." + obj,
			api + "DIRECT.GET." + obj + ".>",
			api + "CONSUMER.CREATE." + obj,
			api + "CONSUMER.CREATE." + obj + ".>",
			api + "CONSUMER.INFO." + obj + ".*",
			api + "CONSUMER.DELETE." + obj + ".*",
			api + "CONSUMER.MSG.NEXT." + obj + ".*",
			"$JS.FC." + obj + ".>",
			"$JS.ACK." + obj + ".>",
			"$O." + bucket + ".>",
		},
		Subscribe: []string{
			WorkerInboxPrefix(pool) + ".>",
			// A cancelled job's worker hears it here, and a job asked
			// to move; publishing either is the control plane's alone.
			CancelSubject("*"),
			MoveSubject("*"),
		},
	}
	return r
}

// SubmitterRole is a submitter's of projects: it publishes submissions and
// calls the client service for those projects only, and hears replies on
// their inboxes.
func SubmitterRole(projects ...string) NATSRole {
	projects = slices.Clone(projects)
	slices.Sort(projects)
	projects = slices.Compact(projects)
	r := NATSRole{Name: RoleUser(RoleSubmitter, projects...), Publish: []string{}, Subscribe: []string{}}
	for _, p := range projects {
		r.Publish = append(r.Publish, SubmitSubject(p), "gpuq.svc.client."+p+".>")
		r.Subscribe = append(r.Subscribe, ClientInbox(p)+".>")
	}
	return r
}

// RoleUser is the NATS user name of a role: its kind, then its scope, joined
// by '.': control, worker.<pool>.<region>, submitter.<project>[.<project>…].
// A credential issued for one machine adds the machine's id after the
// scope (IssueWorker).
func RoleUser(kind string, scope ...string) string {
	return strings.Join(append([]string{kind}, scope...), ".")
}

// ParseRoleUser returns the role a user name carries, and the machine it was
// issued for, if any.
func ParseRoleUser(user string) (role NATSRole, instance string, err error) {
	parts := strings.Split(user, ".")
	switch parts[0] {
	case RoleControl:
		if len(parts) != 1 {
			return NATSRole{}, "", fmt.Errorf("user %q: control takes no scope", user)
		}
		return ControlRole(), "", nil
	case RoleWorker:
		if len(parts) != 3 && len(parts) != 4 {
			return NATSRole{}, "", fmt.Errorf("user %q: want worker.<pool>.<region>[.<instance>]", user)
		}
		if err := ValidatePool(parts[1]); err != nil {
			return NATSRole{}, "", fmt.Errorf("user %q: %w", user, err)
		}
		if err := validRegionToken(parts[2]); err != nil {
			return NATSRole{}, "", fmt.Errorf("user %q: %w", user, err)
		}
		if len(parts) == 4 {
			instance = parts[3]
			if err := validRegionToken(instance); err != nil {
				return NATSRole{}, "", fmt.Errorf("user %q: instance: %w", user, err)
			}
		}
		return WorkerRole(parts[1], parts[2]), instance, nil
	case RoleSubmitter:
		if len(parts) < 2 {
			return NATSRole{}, "", fmt.Errorf("user %q: want submitter.<project>[.<project>…]", user)
		}
		for _, p := range parts[1:] {
			if !projectRe.MatchString(p) {
				return NATSRole{}, "", fmt.Errorf("user %q: project %q is not a project name", user, p)
			}
		}
		return SubmitterRole(parts[1:]...), "", nil
	default:
		return NATSRole{}, "", fmt.Errorf("user %q: unknown role %q (want control, worker or submitter)", user, parts[0])
	}
}

// ValidateRegion checks that a region can be one token of a user name and a
// subject, as a worker credential needs.
func ValidateRegion(region string) error { return validRegionToken(region) }

// validRegionToken checks that a region (or instance id) can be one token of
// a user name and a subject.
func validRegionToken(s string) error {
	if s == "" || len(s) > 64 {
		return fmt.Errorf("%q: must be 1–64 letters, digits, '-' or '_'", s)
	}
	for _, r := range s {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_') {
			return fmt.Errorf("%q: must be 1–64 letters, digits, '-' or '_'", s)
		}
	}
	return nil
}

// InboxFor is the inbox prefix a connection holding user must use, so that
// its role may hear its replies; "" for the default (the control plane's).
func InboxFor(user string) string {
	role, _, err := ParseRoleUser(user)
	if err != nil || role.All() {
		return ""
	}
	for _, s := range role.Subscribe {
		if p, ok := strings.CutSuffix(s, ".>"); ok && strings.HasPrefix(p, "_INBOX.") {
			return p
		}
	}
	return ""
}

// PasswordVariable names the environment variable a NATS server's
// configuration reads a role's password from: GPUQ_NATS_PASSWORD_ and the
// user name in upper case with every other character than a letter or digit
// turned into '_'.
func PasswordVariable(user string) string {
	return "GPUQ_NATS_PASSWORD_" + strings.Map(func(r rune) rune {
		switch {
		case r >= 'a' && r <= 'z':
			return r - 'a' + 'A'
		case r >= 'A' && r <= 'Z', r >= '0' && r <= '9':
			return r
		}
		return '_'
	}, user)
}

// AuthConfig is a nats-server authorization block granting roles: one user
// per role, its password read from the environment (PasswordVariable; a
// bcrypt hash there keeps the plain password off the server).
func AuthConfig(roles []NATSRole) string {
	var b strings.Builder
	b.WriteString("authorization {\n  users: [\n")
	for _, r := range roles {
		fmt.Fprintf(&b, "    {\n      user: %s\n      password: $%s\n", quote(r.Name), PasswordVariable(r.Name))
		if !r.All() {
			b.WriteString("      permissions: {\n")
			for _, p := range []struct {
				name    string
				subject []string
			}{{"publish", r.Publish}, {"subscribe", r.Subscribe}} {
				fmt.Fprintf(&b, "        %s: {\n          allow: [\n", p.name)
				for _, s := range p.subject {
					fmt.Fprintf(&b, "            %s\n", quote(s))
				}
				b.WriteString("          ]\n        }\n")
			}
			b.WriteString("      }\n")
		}
		b.WriteString("    }\n")
	}
	b.WriteString("  ]\n}\n")
	return b.String()
}

// quote writes s as a double-quoted string of the NATS configuration.
func quote(s string) string {
	var b strings.Builder
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	enc.Encode(s) //nolint:errcheck // a string always encodes
	return strings.TrimSuffix(b.String(), "\n")
}
