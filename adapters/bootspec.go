package adapters

import (
	"fmt"
	"log/slog"
	"net/url"
	"slices"
	"strconv"
	"strings"
)

// The environment a booted worker reads its connection from. The NATS
// credential travels in the environment (a 0600 file on a VM), never on a
// command line.
const (
	EnvNATSURL        = "GPUQ_NATS_URL"
	EnvNATSCredential = "GPUQ_NATS_CREDENTIAL"
	EnvInstanceID     = "GPUQ_INSTANCE_ID"
)

// ControlPlaneEnv are the variables of the control plane's environment that
// only it may hold: a worker it starts on its own machine (gpuq dev's, the
// local provider's) does not inherit them.
var ControlPlaneEnv = []string{"GPUQ_DATABASE_URL", "GPUQ_SECRETS_KEY"}

// BootSpec is everything a rented machine needs to become a worker of its
// pool: the `gpuq worker --pool P …` command line, the NATS URL, the
// instance's own NATS credential and gpuq's ids. It never carries a
// database URL: workers reach the control plane through NATS only.
type BootSpec struct {
	// InstanceID is gpuq's id of the instance, recorded before the launch;
	// 1–64 characters of [A-Za-z0-9-]. The worker's node id.
	InstanceID string
	Pool       string
	Region     string
	// Country is the ISO 3166-1 alpha-2 code of the pool's location.
	Country string
	// Slots is the worker's --slots; 0 leaves the worker's default.
	Slots int
	// Notice is the worker's --notice; empty leaves the worker's default.
	Notice NoticeSource
	// WorkerArgs are further `gpuq worker` flags (--ack-wait 30s …). Each
	// is checked: no database URL, nothing systemd or a shell would expand.
	WorkerArgs []string
	// NATSURL is the NATS server (or a comma-separated list of servers),
	// scheme nats, tls, ws or wss, with no user or password in it.
	NATSURL string
	// Credential is the instance's own NATS credential, scoped to its pool
	// and issued by the control plane: one line of printable ASCII. Empty
	// only where the NATS server asks for none (gpuq dev's embedded one).
	Credential Secret
	// Executable is the gpuq binary on the machine; default
	// /usr/local/bin/gpuq (where deploy/ installs it).
	Executable string
	// Image is the container image, for container providers.
	Image string
}

// DefaultExecutable is where deploy/ installs gpuq on a worker machine.
const DefaultExecutable = "/usr/local/bin/gpuq"

// maxCredential bounds the credential; a NATS user JWT plus seed is ~1 KiB.
const maxCredential = 16 << 10

// Validate checks the spec, naming the field at fault.
func (b BootSpec) Validate() error {
	if !validToken(b.InstanceID) {
		return fmt.Errorf("instance_id: want 1–64 characters of [A-Za-z0-9-], got %q", b.InstanceID)
	}
	for name, v := range map[string]string{"pool": b.Pool, "region": b.Region} {
		if v == "" || !safeArg(v) {
			return fmt.Errorf("%s: want letters, digits and ._:/=@,+-, got %q", name, v)
		}
	}
	if len(b.Country) != 2 || strings.ToUpper(b.Country) != b.Country || !safeArg(b.Country) {
		return fmt.Errorf("country: want an ISO 3166-1 alpha-2 code such as DE, got %q", b.Country)
	}
	if b.Slots < 0 || b.Slots > 256 {
		return fmt.Errorf("slots: must be 0–256, got %d", b.Slots)
	}
	if b.Notice != "" {
		if _, err := ParseNoticeSource(string(b.Notice)); err != nil {
			return fmt.Errorf("notice: %w", err)
		}
	}
	for i, a := range b.WorkerArgs {
		if !safeArg(a) {
			return fmt.Errorf("worker_args[%d]: %q has characters other than letters, digits and ._:/=@,+-", i, a)
		}
		if mentionsDatabase(a) {
			return fmt.Errorf("worker_args[%d]: a worker is never given a database URL", i)
		}
	}
	if err := validNATSURL(b.NATSURL); err != nil {
		return fmt.Errorf("nats_url: %w", err)
	}
	if c := b.Credential.Reveal(); len(c) > maxCredential || strings.IndexFunc(c, func(r rune) bool { return r < 0x20 || r > 0x7e }) >= 0 {
		return fmt.Errorf("credential: want one line of printable ASCII of at most %d bytes", maxCredential)
	}
	if b.Executable != "" && (!strings.HasPrefix(b.Executable, "/") || !safeArg(b.Executable)) {
		return fmt.Errorf("executable: want an absolute path of letters, digits and ._/-, got %q", b.Executable)
	}
	if b.Image != "" && (strings.ContainsAny(b.Image, " \t\r\n") || len(b.Image) > 512) {
		return fmt.Errorf("image: %q is not an image reference", b.Image)
	}
	return nil
}

// safeArg reports whether s can go on a command line, into a systemd unit
// or into YAML unquoted.
func safeArg(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || strings.IndexByte("._:/=@,+-", c) >= 0) {
			return false
		}
	}
	return true
}

func mentionsDatabase(s string) bool {
	l := strings.ToLower(s)
	return strings.Contains(l, "database") || strings.HasPrefix(l, "postgres") || strings.Contains(l, "postgres://") ||
		strings.Contains(l, "postgresql://") || strings.Contains(l, "sslmode=")
}

func validNATSURL(s string) error {
	if s == "" {
		return fmt.Errorf("must be set")
	}
	for _, part := range strings.Split(s, ",") {
		u, err := url.Parse(strings.TrimSpace(part))
		if err != nil {
			return fmt.Errorf("%q is not a URL", part)
		}
		switch u.Scheme {
		case "nats", "tls", "ws", "wss":
		default:
			return fmt.Errorf("want a nats://, tls://, ws:// or wss:// URL, got scheme %q", u.Scheme)
		}
		if u.User != nil {
			return fmt.Errorf("must not carry a user or password; the credential goes in credential")
		}
		if u.Host == "" || !safeArg(u.Host) {
			return fmt.Errorf("%q has no usable host", part)
		}
	}
	return nil
}

// Args is the worker's command line after the executable.
func (b BootSpec) Args() []string {
	args := []string{"worker", "--pool", b.Pool, "--region", b.Region, "--country", b.Country, "--instance-id", b.InstanceID}
	if b.Slots > 0 {
		args = append(args, "--slots", strconv.Itoa(b.Slots))
	}
	if b.Notice != "" {
		args = append(args, "--notice", string(b.Notice))
	}
	return append(args, b.WorkerArgs...)
}

// Command is the worker's full command line.
func (b BootSpec) Command() []string {
	exe := b.Executable
	if exe == "" {
		exe = DefaultExecutable
	}
	return append([]string{exe}, b.Args()...)
}

// Environ is the worker's environment, credential included, as KEY=VALUE
// pairs in a fixed order. Hand it only to the process or provider that
// starts the worker; never log it.
func (b BootSpec) Environ() []string {
	env := []string{EnvNATSURL + "=" + b.NATSURL}
	if !b.Credential.IsZero() {
		env = append(env, EnvNATSCredential+"="+b.Credential.Reveal())
	}
	return append(env, EnvInstanceID+"="+b.InstanceID)
}

// String describes the spec without its credential.
func (b BootSpec) String() string {
	return fmt.Sprintf("boot %s for pool %s: %s (nats %s, credential %s)", b.InstanceID, b.Pool,
		strings.Join(b.Command(), " "), b.NATSURL, b.Credential)
}

// LogValue keeps slog from printing the credential.
func (b BootSpec) LogValue() slog.Value {
	return slog.GroupValue(slog.String("instance", b.InstanceID), slog.String("pool", b.Pool),
		slog.String("nats_url", b.NATSURL), slog.String("credential", b.Credential.String()))
}

// envFile is /etc/gpuq/worker.env: systemd's EnvironmentFile reads
// double-quoted values with backslash escapes.
func (b BootSpec) envFile() []string {
	var lines []string
	for _, kv := range b.Environ() {
		k, v, _ := strings.Cut(kv, "=")
		v = strings.NewReplacer(`\`, `\\`, `"`, `\"`).Replace(v)
		lines = append(lines, k+"=\""+v+"\"")
	}
	return lines
}

func (b BootSpec) unit() string { return "gpuq-worker@" + b.Pool + ".service" }

// dropIn overrides the unit's command line with the spec's.
func (b BootSpec) dropIn() []string {
	return []string{"[Service]", "ExecStart=", "ExecStart=" + strings.Join(b.Command(), " ")}
}

// CloudInit renders the spec as cloud-init user data for a VM whose image
// carries gpuq and deploy/systemd/gpuq-worker@.service: it writes the
// worker's environment to /etc/gpuq/worker.env (mode 0600), overrides the
// unit's command line with the spec's, and starts the unit.
func (b BootSpec) CloudInit() (string, error) {
	if err := b.Validate(); err != nil {
		return "", err
	}
	var s strings.Builder
	s.WriteString("#cloud-config\n")
	s.WriteString("# gpuq worker " + b.InstanceID + " for pool " + b.Pool + "\n")
	s.WriteString("write_files:\n")
	s.WriteString("  - path: /etc/gpuq/worker.env\n    permissions: \"0600\"\n    content: |\n")
	for _, l := range b.envFile() {
		s.WriteString("      " + l + "\n")
	}
	s.WriteString("  - path: /etc/systemd/system/" + b.unit() + ".d/boot.conf\n    permissions: \"0644\"\n    content: |\n")
	for _, l := range b.dropIn() {
		s.WriteString("      " + l + "\n")
	}
	s.WriteString("runcmd:\n  - [systemctl, daemon-reload]\n  - [systemctl, enable, --now, \"" + b.unit() + "\"]\n")
	return s.String(), nil
}

// StartupScript renders the spec as a shell script for VM providers that
// run a script at first boot instead of cloud-init; it does what CloudInit
// does.
func (b BootSpec) StartupScript() (string, error) {
	if err := b.Validate(); err != nil {
		return "", err
	}
	const eof = "GPUQ_BOOT_EOF"
	var s strings.Builder
	s.WriteString("#!/bin/sh\n# gpuq worker " + b.InstanceID + " for pool " + b.Pool + "\nset -eu\n")
	s.WriteString("umask 077\nmkdir -p /etc/gpuq\ncat > /etc/gpuq/worker.env <<'" + eof + "'\n")
	for _, l := range b.envFile() {
		s.WriteString(l + "\n")
	}
	s.WriteString(eof + "\numask 022\n")
	dir := "/etc/systemd/system/" + b.unit() + ".d"
	s.WriteString("mkdir -p " + dir + "\ncat > " + dir + "/boot.conf <<'" + eof + "'\n")
	for _, l := range b.dropIn() {
		s.WriteString(l + "\n")
	}
	s.WriteString(eof + "\nsystemctl daemon-reload\nsystemctl enable --now " + b.unit() + "\n")
	return s.String(), nil
}

// ContainerSpec is a boot spec for a container provider.
type ContainerSpec struct {
	Image   string
	Command []string
	// Env holds the credential: log the spec through String or LogValue.
	Env map[string]string
}

// Container renders the spec for a container provider.
func (b BootSpec) Container() (ContainerSpec, error) {
	if err := b.Validate(); err != nil {
		return ContainerSpec{}, err
	}
	if b.Image == "" {
		return ContainerSpec{}, fmt.Errorf("image: must be set for a container provider")
	}
	c := ContainerSpec{Image: b.Image, Command: b.Command(), Env: map[string]string{}}
	for _, kv := range b.Environ() {
		k, v, _ := strings.Cut(kv, "=")
		c.Env[k] = v
	}
	return c, nil
}

// String describes the container without the credential.
func (c ContainerSpec) String() string {
	keys := make([]string, 0, len(c.Env))
	for k := range c.Env {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	env := make([]string, len(keys))
	for i, k := range keys {
		v := c.Env[k]
		if k == EnvNATSCredential {
			v = redacted
		}
		env[i] = k + "=" + v
	}
	return fmt.Sprintf("container %s: %s (env %s)", c.Image, strings.Join(c.Command, " "), strings.Join(env, " "))
}

// GoString keeps %#v from printing the credential.
func (c ContainerSpec) GoString() string { return c.String() }

// LogValue keeps slog from printing the credential.
func (c ContainerSpec) LogValue() slog.Value { return slog.StringValue(c.String()) }
