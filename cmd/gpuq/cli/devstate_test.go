package cli

import (
	"bufio"
	"database/sql"
	"encoding/json"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gpuq/gpuq/queue"
	"github.com/gpuq/gpuq/queue/queuetest"
)

// devRun is one `gpuq dev` process started as a user starts it, in dir.
type devRun struct {
	cmd  *exec.Cmd
	logs *syncBuffer
	conn struct {
		NATSURL     string `json:"nats_url"`
		DatabaseURL string `json:"database_url"`
		MetricsURL  string `json:"metrics_url"`
	}
	exited chan struct{}
}

func startDev(t *testing.T, bin, dir string, args ...string) *devRun {
	t.Helper()
	d, stdout := launchDev(t, bin, dir, append([]string{"-o", "json", "--slots", "1"}, args...)...)
	if err := json.NewDecoder(bufio.NewReader(stdout)).Decode(&d.conn); err != nil {
		t.Fatalf("gpuq dev did not report its connection settings: %v\n%s", err, d.logs.String())
	}
	go io.Copy(io.Discard, stdout) //nolint:errcheck // drained
	return d
}

// launchDev starts `gpuq dev` with args in dir, stopped with SIGTERM at the
// end of the test, and returns its standard output.
func launchDev(t *testing.T, bin, dir string, args ...string) (*devRun, io.Reader) {
	t.Helper()
	d := &devRun{cmd: exec.Command(bin, append([]string{"dev"}, args...)...), logs: &syncBuffer{}, exited: make(chan struct{})}
	d.cmd.Dir = dir
	d.cmd.Stderr = d.logs
	stdout, err := d.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := d.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { d.cmd.Wait(); close(d.exited) }() //nolint:errcheck // its status is not the point
	t.Cleanup(func() {
		d.cmd.Process.Signal(syscall.SIGTERM) //nolint:errcheck // it may have exited
		select {
		case <-d.exited:
		case <-time.After(30 * time.Second):
			d.cmd.Process.Kill() //nolint:errcheck // stuck
			<-d.exited
		}
		if t.Failed() {
			t.Logf("gpuq dev (pid %d) output:\n%s", d.cmd.Process.Pid, d.logs.String())
		}
	})
	return d, stdout
}

// children are the processes whose parent is pid.
func children(t *testing.T, pid int) []int {
	t.Helper()
	entries, err := os.ReadDir("/proc")
	if err != nil {
		t.Skip("no /proc here")
	}
	var out []int
	for _, e := range entries {
		child, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		stat, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		// pid (comm) state ppid …: comm may hold spaces, so split after it.
		fields := strings.Fields(string(stat[strings.LastIndexByte(string(stat), ')')+1:]))
		if len(fields) > 1 && fields[1] == strconv.Itoa(pid) {
			out = append(out, child)
		}
	}
	return out
}

func mode(t *testing.T, path string) os.FileMode {
	t.Helper()
	info, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return info.Mode().Perm()
}

// gpuq dev owns its directory: its secrets are in files only its user can
// read and in no command line, its database asks for a password, a second
// dev there fails naming the first, and after the first is killed a new one
// starts there, rewrites its config and runs jobs.
func TestDevOwnsItsDirectoryAndKeepsItsSecretsOff(t *testing.T) {
	t.Parallel()
	if _, err := os.Stat("/proc/self/cmdline"); err != nil {
		t.Skip("no /proc here")
	}
	bin := buildGpuq(t)
	dir := t.TempDir()
	first := startDev(t, bin, dir)

	for _, f := range []string{devConfigFile, devTokenFile, ".gpuq/postgres/password", ".gpuq/dev.lock"} {
		if m := mode(t, filepath.Join(dir, f)); m&0o077 != 0 {
			t.Errorf("%s has mode %o, want no access for group or others", f, m)
		}
	}
	config, err := os.ReadFile(filepath.Join(dir, devConfigFile))
	if err != nil {
		t.Fatal(err)
	}
	cred := devNATSCredential(string(config))
	control, err := queue.ParseNATSCredential(cred)
	if err != nil || control.User != queue.RoleControl {
		t.Fatalf("the dev config must hold the control plane's NATS credential, got %q (%v)", cred, err)
	}
	if lock, _ := os.ReadFile(filepath.Join(dir, ".gpuq", "dev.lock")); strings.TrimSpace(string(lock)) != strconv.Itoa(first.cmd.Process.Pid) {
		t.Fatalf("dev.lock holds %q, want dev's pid %d", lock, first.cmd.Process.Pid)
	}

	// The private cluster asks for the generated password.
	pw, err := os.ReadFile(filepath.Join(dir, ".gpuq", "postgres", "password"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(first.conn.DatabaseURL, strings.TrimSpace(string(pw))) {
		t.Fatal("dev's database URL does not carry the cluster's password")
	}
	db, err := sql.Open("postgres", strings.Replace(first.conn.DatabaseURL, ":"+strings.TrimSpace(string(pw))+"@", "@", 1))
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Ping(); err == nil || !strings.Contains(err.Error(), "password") {
		t.Fatalf("connecting to dev's cluster without its password: %v, want refused", err)
	}
	db.Close()

	// Workers: nothing secret on their command lines; their credential,
	// in their environment, is a worker's of their pool.
	var workers []int
	queuetest := func() bool {
		workers = children(t, first.cmd.Process.Pid)
		return len(workers) >= 2
	}
	for deadline := time.Now().Add(20 * time.Second); !queuetest(); time.Sleep(100 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("dev started %d worker processes, want one per default pool", len(workers))
		}
	}
	for _, pid := range workers {
		cmdline, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "cmdline"))
		if err != nil {
			continue // not a worker after all, or gone
		}
		args := strings.ReplaceAll(string(cmdline), "\x00", " ")
		if !strings.Contains(args, " worker ") {
			continue
		}
		for _, secret := range []string{control.Password, strings.TrimSpace(string(pw)), "database", "postgres://", "credential"} {
			if strings.Contains(args, secret) {
				t.Fatalf("worker %d's command line carries %q: %s", pid, secret, args)
			}
		}
		environ, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "environ"))
		if err != nil {
			t.Fatal(err)
		}
		var got string
		for _, kv := range strings.Split(string(environ), "\x00") {
			if v, ok := strings.CutPrefix(kv, "GPUQ_NATS_CREDENTIAL="); ok {
				got = v
			}
		}
		wc, err := queue.ParseNATSCredential(got)
		if err != nil || !strings.HasPrefix(wc.User, queue.RoleWorker+".local-cpu") {
			t.Fatalf("worker %d holds NATS credential user %q, want a worker of its pool", pid, wc.User)
		}
	}

	// A second dev in the same directory fails, naming the first.
	second := exec.Command(bin, "dev")
	second.Dir = dir
	out, err := second.CombinedOutput()
	if err == nil || !strings.Contains(string(out), "already running") || !strings.Contains(string(out), strconv.Itoa(first.cmd.Process.Pid)) {
		t.Fatalf("a second gpuq dev in the same directory: %v\n%s", err, out)
	}

	// The first crashes; the next one takes the directory over.
	first.cmd.Process.Kill() //nolint:errcheck // the crash
	<-first.exited
	next := startDev(t, bin, dir)
	if next.conn.NATSURL == first.conn.NATSURL {
		t.Fatalf("the restarted dev reports its predecessor's NATS URL %s", next.conn.NATSURL)
	}
	if config2, _ := os.ReadFile(filepath.Join(dir, devConfigFile)); string(config2) == string(config) {
		t.Fatal("the restarted dev did not rewrite its config")
	}
	conf := []string{"--config", filepath.Join(dir, devConfigFile)}
	id, errOut, err := runCLI(t, append([]string{"submit", "-f", writeFile(t, "job.yaml", "name: after-restart\ncommand: [\"true\"]\n")}, conf...)...)
	if err != nil {
		t.Fatalf("submit after the restart: %v\n%s", err, errOut)
	}
	id = strings.TrimSpace(id)
	deadline := time.Now().Add(60 * time.Second)
	for {
		out, _, err := runCLI(t, append([]string{"status", id, "-o", "json"}, conf...)...)
		if err == nil && strings.Contains(out, `"state": "succeeded"`) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the job submitted after the restart did not succeed: %v\n%s", err, out)
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// Ctrl-C stops gpuq dev cleanly: the HTTP API finishes its last writes
// (which tokens were used) before the database closes, and dev exits 0.
func TestDevStopsCleanlyOnCtrlC(t *testing.T) {
	t.Parallel()
	bin := buildGpuq(t)
	dir := t.TempDir()
	d := startDev(t, bin, dir)
	if out, errOut, err := runCLI(t, "ls", "--config", filepath.Join(dir, devConfigFile)); err != nil {
		t.Fatalf("gpuq ls through dev's HTTP API: %v\n%s%s", err, out, errOut)
	}
	if err := d.cmd.Process.Signal(os.Interrupt); err != nil {
		t.Fatal(err)
	}
	select {
	case <-d.exited:
	case <-time.After(60 * time.Second):
		t.Fatal("gpuq dev still running 60s after Ctrl-C")
	}
	if code := d.cmd.ProcessState.ExitCode(); code != 0 {
		t.Errorf("gpuq dev exited with status %d after Ctrl-C, want 0", code)
	}
	for _, bad := range []string{"database is closed", "recording token use"} {
		if strings.Contains(d.logs.String(), bad) {
			t.Errorf("gpuq dev's log says %q while it stops:\n%s", bad, d.logs.String())
		}
	}
}

// ctrlCJob counts until SIGTERM, then commits its count as its final
// checkpoint, as the README's recipe does; a later attempt prints the count
// it resumed from and succeeds.
const ctrlCJob = `step=0
[ "$GPUQ_RESUMED" = 1 ] && step=$(cat "$GPUQ_CHECKPOINT_DIR/step")
if [ "$GPUQ_ATTEMPT" != 1 ]; then echo "resumed=${GPUQ_RESUMED:-0} step=$step"; exit 0; fi
trap 'echo $step > "$GPUQ_CHECKPOINT_DIR/step"; gpuq checkpoint save >/dev/null; exit 143' TERM
echo counting
while :; do step=$((step+1)); sleep 0.1; done
`

// Ctrl-C on gpuq dev stops its workers while the control plane still
// answers them: a running job gets SIGTERM, its final checkpoint is
// recorded and it is handed back as shutdown, so that after a restart it
// resumes from that checkpoint, in the same pool: stopping dev is not a
// preemption, which would move the job off its spot pool. Were the control plane gone first, the
// final checkpoint could not be recorded and the job would start over.
// A `gpuq wait` on the job outlives the restart: it reopens its stream of
// the job's events and ends with the job's success.
func TestCtrlCOnDevHandsRunningJobsBackWithTheirFinalCheckpoint(t *testing.T) {
	t.Parallel()
	bin := buildGpuq(t)
	dir := t.TempDir()
	// Both devs serve the HTTP API at one address, as the default
	// 127.0.0.1:8080 is across a restart; tests running beside this one
	// may hold 8080, and dev would then pick another free port.
	addr := []string{"--http-addr", queuetest.FreeAddr(t)}
	first := startDev(t, bin, dir, addr...)
	conf := []string{"--config", filepath.Join(dir, devConfigFile)}
	spec := "name: counter\ncommand: [/bin/sh, -c, " + strconv.Quote(ctrlCJob) + "]\n"
	out, errOut, err := runCLI(t, append([]string{"submit", "-f", writeFile(t, "job.yaml", spec)}, conf...)...)
	if err != nil {
		t.Fatalf("submit: %v\n%s", err, errOut)
	}
	id := strings.TrimSpace(out)
	// The job counts once its trap is set.
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(250 * time.Millisecond) {
		if out, _, _ := runCLI(t, append([]string{"logs", id}, conf...)...); strings.Contains(out, "counting") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the job did not start counting within a minute\n%s", first.logs.String())
		}
	}
	wait := exec.Command(bin, append([]string{"wait", id}, conf...)...)
	var waitOut, waitErr syncBuffer
	wait.Stdout, wait.Stderr = &waitOut, &waitErr
	if err := wait.Start(); err != nil {
		t.Fatal(err)
	}
	waited := make(chan error, 1)
	go func() { waited <- wait.Wait() }()
	t.Cleanup(func() { wait.Process.Kill() }) //nolint:errcheck // it may have exited
	if err := first.cmd.Process.Signal(os.Interrupt); err != nil {
		t.Fatal(err)
	}
	select {
	case <-first.exited:
	case <-time.After(time.Minute):
		t.Fatal("gpuq dev still running a minute after Ctrl-C")
	}
	if code := first.cmd.ProcessState.ExitCode(); code != 0 {
		t.Errorf("gpuq dev exited with status %d after Ctrl-C, want 0", code)
	}

	startDev(t, bin, dir, addr...)
	select {
	case err := <-waited:
		if err != nil || !strings.Contains(waitOut.String(), "succeeded") {
			t.Fatalf("gpuq wait across dev's restart: %v\n%s%s", err, waitOut.String(), waitErr.String())
		}
	case <-time.After(2 * time.Minute):
		t.Fatalf("gpuq wait still waiting 2 minutes after dev's restart\n%s", waitErr.String())
	}
	if !strings.Contains(waitErr.String(), "reopening it") {
		t.Errorf("gpuq wait did not say its stream dropped:\n%s", waitErr.String())
	}
	var status struct {
		Job struct {
			State       string `json:"state"`
			Preemptions int    `json:"preemptions"`
		} `json:"job"`
		Attempts []struct {
			Outcome string `json:"outcome"`
			Pool    string `json:"pool"`
		} `json:"attempts"`
	}
	for deadline := time.Now().Add(2 * time.Minute); ; time.Sleep(250 * time.Millisecond) {
		out, _, err := runCLI(t, append([]string{"status", id, "-o", "json"}, conf...)...)
		if err == nil && json.Unmarshal([]byte(out), &status) == nil && status.Job.State == string(queue.StateSucceeded) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the job did not succeed after dev's restart: %v\n%s", err, out)
		}
	}
	if len(status.Attempts) != 2 || status.Attempts[0].Outcome != queue.OutcomeShutdown ||
		status.Attempts[1].Pool != status.Attempts[0].Pool || status.Job.Preemptions != 0 {
		t.Fatalf("want attempt 1 handed back as shutdown, no preemption counted, and a second attempt in the same pool, got %+v, %d preemptions",
			status.Attempts, status.Job.Preemptions)
	}
	logs, _, err := runCLI(t, append([]string{"logs", id}, conf...)...)
	if err != nil {
		t.Fatal(err)
	}
	if !regexp.MustCompile(`resumed=1 step=[1-9]`).MatchString(logs) {
		t.Fatalf("attempt 2 must resume from the checkpoint saved at Ctrl-C; logs:\n%s", logs)
	}
}

// gpuq dev started as the quick start starts it prints how to reach it, but
// no secret: the token, the database password and the NATS credential stay
// in their files, and the printed export reads the token from its file.
func TestDevsBannerShowsWhereTheSecretsAreNotWhatTheyAre(t *testing.T) {
	t.Parallel()
	bin := buildGpuq(t)
	dir := t.TempDir()
	dev, stdout := launchDev(t, bin, dir)
	logs := dev.logs
	banner := make(chan string, 1)
	go func() {
		var b strings.Builder
		lines := bufio.NewScanner(stdout)
		for lines.Scan() {
			b.WriteString(lines.Text() + "\n")
			if strings.HasPrefix(lines.Text(), "(settings and credentials") {
				break
			}
		}
		banner <- b.String()
		io.Copy(io.Discard, stdout) //nolint:errcheck // drained
	}()
	var out string
	select {
	case out = <-banner:
	case <-time.After(120 * time.Second):
		t.Fatalf("gpuq dev printed no banner in 2 minutes:\n%s", logs.String())
	}
	read := func(name string) string {
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		return strings.TrimSpace(string(b))
	}
	token, password := read(devTokenFile), read(".gpuq/postgres/password")
	control, err := queue.ParseNATSCredential(devNATSCredential(read(devConfigFile)))
	if err != nil || token == "" || password == "" {
		t.Fatalf("dev's files: token %d bytes, password %d bytes, NATS credential %v", len(token), len(password), err)
	}
	for name, secret := range map[string]string{"the API token": token, "the database password": password, "the NATS password": control.Password} {
		if strings.Contains(out, secret) {
			t.Errorf("dev's banner shows %s:\n%s", name, out)
		}
		if strings.Contains(logs.String(), secret) {
			t.Errorf("dev's log shows %s", name)
		}
	}
	var export string
	for _, line := range strings.Split(out, "\n") {
		if strings.Contains(line, "export GPUQ_TOKEN=") {
			export = strings.TrimSpace(line)
		}
	}
	sh := exec.Command("sh", "-c", export+` && printf %s "$GPUQ_TOKEN"`)
	sh.Dir = t.TempDir() // elsewhere, as the banner's exports are for
	got, err := sh.Output()
	if err != nil || string(got) != token {
		t.Fatalf("the banner's %q gives GPUQ_TOKEN %d bytes (%v), want the token of %s", export, len(got), err, devTokenFile)
	}
}

// devNATSCredential is the NATS credential in the config gpuq dev writes
// (config), or "" when it holds none.
func devNATSCredential(config string) string {
	for _, line := range strings.Split(config, "\n") {
		if cred, ok := strings.CutPrefix(line, "nats-credential: "); ok {
			return cred
		}
	}
	return ""
}
