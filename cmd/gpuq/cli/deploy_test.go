package cli

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.yaml.in/yaml/v3"

	"github.com/gpuq/gpuq/queue"
	"github.com/gpuq/gpuq/queue/queuetest"
	"github.com/gpuq/gpuq/sql/pgtest"
)

// deployDir is the repository's deploy/ folder, seen from this package.
var deployDir = filepath.Join("..", "..", "..", "deploy")

// clusterConfUsers are the NATS users of deploy/nats/cluster.conf: the
// control plane and those of deploy/nats/roles.yaml.
var clusterConfUsers = []string{"control", "worker.aws-fra-l4-spot.eu-central-1", "worker.aws-dub-l4.eu-west-1",
	"worker.verda-hel-h100.FIN-01", "worker.k8s-cpu.eu-central-1", "worker.k8s-l4.eu-central-1",
	"submitter.default", "submitter.research.vision"}

// container is one process of a deployment as its manifest starts it: the
// arguments after the image's entrypoint (gpuq), the environment the
// manifest gives it, and the files it mounts (container path → file here).
type container struct {
	args  []string
	env   map[string]string
	files map[string]string
	ports []string // what compose publishes
}

// hostArgs returns the container's arguments with every mounted path
// replaced by the file it mounts, and each argument named in swap (a
// container's listen address, say) replaced by its value here.
func (c container) hostArgs(swap map[string]string) []string {
	out := slices.Clone(c.args)
	for i, a := range out {
		if f, ok := c.files[a]; ok {
			out[i] = f
		}
		if v, ok := swap[a]; ok {
			out[i] = v
		}
	}
	return out
}

// environ is the container's environment as a process gets it: the
// manifest's variables and a PATH and HOME, nothing of the test's own.
func (c container) environ(t *testing.T, swap func(string) string) []string {
	env := []string{"PATH=" + os.Getenv("PATH"), "HOME=" + t.TempDir()}
	for k, v := range c.env {
		env = append(env, k+"="+swap(v))
	}
	sort.Strings(env)
	return env
}

// interpolation is compose's ${VAR}, ${VAR:?message} and ${VAR:-default}.
var interpolation = regexp.MustCompile(`\$\{([A-Za-z_][A-Za-z0-9_]*)(?::([?-])([^}]*))?\}`)

// interpolate fills a compose file's variables from vars as `docker
// compose` does, failing on a required one that is missing.
func interpolate(t *testing.T, text string, vars map[string]string) string {
	t.Helper()
	return interpolation.ReplaceAllStringFunc(text, func(m string) string {
		g := interpolation.FindStringSubmatch(m)
		if v, ok := vars[g[1]]; ok && v != "" {
			return v
		}
		switch g[2] {
		case "?":
			t.Fatalf("compose would refuse to start: %s: %s", g[1], g[3])
		case "-":
			return g[3]
		}
		return ""
	})
}

// composeServices reads a compose file with vars as its .env, and returns
// its services as containers; a relative volume is a file beside it.
func composeServices(t *testing.T, path string, vars map[string]string) map[string]container {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Services map[string]struct {
			Command     []string          `yaml:"command"`
			Environment map[string]string `yaml:"environment"`
			Volumes     []string          `yaml:"volumes"`
			Ports       []string          `yaml:"ports"`
		} `yaml:"services"`
	}
	if err := yaml.Unmarshal([]byte(interpolate(t, string(raw), vars)), &doc); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	out := map[string]container{}
	for name, s := range doc.Services {
		c := container{args: s.Command, env: s.Environment, files: map[string]string{}, ports: s.Ports}
		for _, v := range s.Volumes {
			parts := strings.Split(v, ":")
			if len(parts) >= 2 && strings.HasPrefix(parts[0], ".") {
				c.files[parts[1]] = filepath.Join(filepath.Dir(path), parts[0])
			}
		}
		out[name] = c
	}
	return out
}

// startDeployNATS loads a deployment's NATS configuration into a NATS
// server on this machine, as a node of it loads it (the passwords from the
// environment the manifest gives it), on a free port and a temporary store.
func startDeployNATS(t *testing.T, config string, env map[string]string, check ...func(*server.Options)) *server.Server {
	t.Helper()
	for k, v := range env {
		t.Setenv(k, v)
	}
	opts, err := server.ProcessConfigFile(config)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range check {
		c(opts)
	}
	opts.Host, opts.Port, opts.HTTPPort, opts.StoreDir = "127.0.0.1", server.RANDOM_PORT, 0, t.TempDir()
	opts.Cluster, opts.Routes, opts.NoSigs, opts.NoLog = server.ClusterOpts{}, nil, true, true
	srv, err := server.NewServer(opts)
	if err != nil {
		t.Fatal(err)
	}
	go srv.Start()
	if !srv.ReadyForConnections(10 * time.Second) {
		t.Fatal("NATS server not ready")
	}
	t.Cleanup(srv.Shutdown)
	return srv
}

// deployDatabase makes what a deployment's PostgreSQL holds at first start:
// an empty database owned by a role of its own with the password the
// manifest's URL gives. It returns that URL with this machine's host, and
// the database and role (named uniquely, so that a shared test server's
// roles are never touched), which are dropped when the test ends.
func deployDatabase(t *testing.T, manifestURL string) string {
	t.Helper()
	u, err := url.Parse(manifestURL)
	if err != nil {
		t.Fatalf("database URL: %v", err)
	}
	password, _ := u.User.Password()
	adminURL := pgtest.URL(t)
	admin, err := sql.Open("postgres", adminURL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { admin.Close() })
	name := "gpuq_deploy_" + randomHex(6)
	for _, s := range []string{
		fmt.Sprintf("CREATE ROLE %s LOGIN PASSWORD '%s'", name, password),
		fmt.Sprintf("CREATE DATABASE %s OWNER %s", name, name),
	} {
		if _, err := admin.Exec(s); err != nil {
			t.Fatalf("%s: %v", s, err)
		}
	}
	t.Cleanup(func() {
		admin.Exec("DROP DATABASE IF EXISTS " + name + " WITH (FORCE)") //nolint:errcheck // best effort
		admin.Exec("DROP ROLE IF EXISTS " + name)                       //nolint:errcheck // best effort
	})
	here, err := url.Parse(adminURL)
	if err != nil {
		t.Fatal(err)
	}
	u.User = url.UserPassword(name, password)
	u.Host, u.Path = here.Host, "/"+name
	return u.String()
}

func randomHex(n int) string {
	b := make([]byte, n)
	rand.Read(b) //nolint:errcheck // never fails
	return hex.EncodeToString(b)
}

// runDeployed runs gpuq in c's environment (as `docker compose exec` or
// `kubectl exec` would) and returns its standard output.
func runDeployed(t *testing.T, bin string, env []string, args ...string) string {
	t.Helper()
	cmd := exec.Command(bin, args...)
	cmd.Env = env
	var errOut strings.Builder
	cmd.Stderr = &errOut
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("gpuq %s: %v\n%s%s", strings.Join(args, " "), err, out, errOut.String())
	}
	return string(out)
}

// startDeployed starts a deployment's container as a process here.
func startDeployed(t *testing.T, bin string, c container, swap func(string) string) *proc {
	t.Helper()
	return startProcEnv(t, bin, c.environ(t, swap), c.hostArgs(nil)...)
}

// startDeployedServer starts a deployment's server container with its API
// on a free port instead of 0.0.0.0:8080 (the port compose publishes and
// the Service targets), and waits for the API's health check. It returns
// the server's environment and the API's URL.
func startDeployedServer(t *testing.T, bin string, srv container, swap func(string) string) ([]string, string) {
	t.Helper()
	if !slices.Contains(srv.args, "0.0.0.0:8080") {
		t.Fatalf("the server must listen on 0.0.0.0:8080: %v", srv.args)
	}
	api := queuetest.FreeAddr(t)
	env := srv.environ(t, swap)
	server := startProcEnv(t, bin, env, srv.hostArgs(map[string]string{"0.0.0.0:8080": api})...)
	base := "http://" + api
	waitHealthy(t, base, server)
	return env, base
}

// waitHealthy waits for the HTTP API at base to answer its health check.
func waitHealthy(t *testing.T, base string, server *proc) {
	t.Helper()
	waitFor(t, 90*time.Second, "the HTTP API never answered its health check", func() bool {
		select {
		case <-server.done:
			t.Fatalf("gpuq server exited:\n%s", server.logs.String())
		default:
		}
		resp, err := http.Get(base + "/v1/healthz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
}

// submitThroughTheAPI creates a submit token in the server's environment,
// as the deployment's README says, then submits a job through the HTTP API
// with it, waits for it and downloads its outputs, as a user's shell would.
func submitThroughTheAPI(t *testing.T, bin string, serverEnv []string, base, marker string) {
	t.Helper()
	var tok struct {
		Token string `json:"token"`
	}
	out := runDeployed(t, bin, serverEnv, "token", "create", "--project", "default", "--role", "submit", "-o", "json")
	if err := json.Unmarshal([]byte(out), &tok); err != nil || tok.Token == "" {
		t.Fatalf("token create -o json: %v\n%s", err, out)
	}
	user := []string{"PATH=" + os.Getenv("PATH"), "HOME=" + t.TempDir(), "GPUQ_URL=" + base, "GPUQ_TOKEN=" + tok.Token}
	id := strings.TrimSpace(runDeployed(t, bin, user, "submit", "--name", "deployed", "--",
		"sh", "-c", "echo "+marker+"; echo "+marker+" > $GPUQ_OUTPUT_DIR/answer.txt"))
	runDeployed(t, bin, user, "wait", "--timeout", "90s", id)
	if logs := runDeployed(t, bin, user, "logs", id); !strings.Contains(logs, marker) {
		t.Fatalf("the job's log lacks %q:\n%s", marker, logs)
	}
	// The outputs went to the pool's store and come back through the API.
	dir := t.TempDir()
	runDeployed(t, bin, user, "results", id, "--dir", dir)
	if got, err := os.ReadFile(filepath.Join(dir, "answer.txt")); err != nil || strings.TrimSpace(string(got)) != marker {
		t.Fatalf("results: answer.txt = %q, %v; want %q", got, err, marker)
	}
}

// TestComposeDeploymentRunsAJobAsComposeStartsIt runs deploy/compose as
// `docker compose up` would, without Docker: its NATS configuration loaded
// into a NATS server here with the passwords of a generated .env, a fresh
// database and role with the password the server's URL gives, and the
// server and worker processes with the compose file's own command lines,
// environment and mounted files. Only addresses and names change: the
// services' host names become this machine's ports, the database and its
// role get unique names, and the API listens on a free port instead of
// 8080. Then it creates a token in the server's environment (`docker
// compose exec server gpuq token create`), runs a job through the HTTP API
// with it, and one over NATS with the submitter credential.
func TestComposeDeploymentRunsAJobAsComposeStartsIt(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a deployment's server and worker processes")
	}
	bin := buildGpuq(t)
	// The .env the README's loop writes: a random password per variable.
	loop := readmeEnvLoop.FindStringSubmatch(readme(t))
	if loop == nil {
		t.Fatal("README.md has no loop writing deploy/compose/.env")
	}
	vars := map[string]string{}
	for _, v := range strings.Fields(strings.ReplaceAll(loop[1], "\\", " ")) {
		vars[v] = randomHex(24)
	}
	compose := filepath.Join(deployDir, "compose", "compose.yaml")
	services := composeServices(t, compose, vars)
	for _, name := range []string{"nats", "postgres", "server", "worker"} {
		if _, ok := services[name]; !ok {
			t.Fatalf("compose.yaml has no service %q", name)
		}
	}

	// Only the server holds the database URL and the control plane's
	// credential; the worker holds its pool's NATS user.
	for name, c := range services {
		for k, v := range c.env {
			if name != "server" && name != "postgres" && strings.Contains(v, vars["GPUQ_POSTGRES_PASSWORD"]) {
				t.Errorf("service %s holds the database password in %s", name, k)
			}
			if name != "server" && name != "nats" && strings.Contains(v, vars["GPUQ_NATS_PASSWORD_CONTROL"]) {
				t.Errorf("service %s holds the control plane's NATS password in %s", name, k)
			}
		}
	}

	natsSvc := services["nats"]
	if len(natsSvc.args) != 2 || natsSvc.args[0] != "-c" || natsSvc.files[natsSvc.args[1]] == "" {
		t.Fatalf("the nats service must load a mounted config file with -c, got %v", natsSvc.args)
	}
	ns := startDeployNATS(t, natsSvc.files[natsSvc.args[1]], natsSvc.env)
	pg := services["postgres"]
	dbURL := deployDatabase(t, services["server"].env["GPUQ_DATABASE_URL"])
	if u, _ := url.Parse(services["server"].env["GPUQ_DATABASE_URL"]); u.Host != "postgres:5432" ||
		u.User.Username() != pg.env["POSTGRES_USER"] || u.Path != "/"+pg.env["POSTGRES_DB"] {
		t.Fatalf("the server's database URL does not name the postgres service's user and database: %s", u.Redacted())
	}
	natsHere := strings.TrimPrefix(ns.ClientURL(), "nats://")
	swap := func(v string) string {
		if strings.HasPrefix(v, "postgres://") {
			return dbURL
		}
		return strings.ReplaceAll(v, "nats:4222", natsHere)
	}

	serverEnv, base := startDeployedServer(t, bin, services["server"], swap)
	worker := startDeployed(t, bin, services["worker"], swap)
	waitFor(t, 60*time.Second, "the worker never passed its canary", func() bool {
		return strings.Contains(worker.logs.String(), "canary passed")
	})
	submitThroughTheAPI(t, bin, serverEnv, base, "ran-in-compose")

	// A script on the host submits over NATS with the submitter credential,
	// as the README shows, through the port compose publishes.
	if !slices.Contains(natsSvc.ports, "127.0.0.1:4222:4222") {
		t.Fatal("compose does not publish NATS on 127.0.0.1:4222 for submitters")
	}
	script := []string{"PATH=" + os.Getenv("PATH"), "HOME=" + t.TempDir(), "GPUQ_NATS_URL=" + ns.ClientURL(),
		"GPUQ_NATS_CREDENTIAL=submitter.default:" + vars["GPUQ_NATS_PASSWORD_SUBMITTER_DEFAULT"]}
	if out := runDeployed(t, bin, script, "submit", "--wait", "--name", "over-nats", "--", "echo", "hello"); !strings.Contains(out, "succeeded") {
		t.Fatalf("submit --wait over NATS:\n%s", out)
	}
}

// kubeDeployments reads every manifest of dir and returns each Deployment's
// first container as a container: its args, its environment with each
// secretKeyRef read from secrets ("name/key") and each fieldRef from fields,
// and each mounted ConfigMap's keys written to files here.
func kubeDeployments(t *testing.T, dir string, secrets, fields map[string]string) map[string]container {
	t.Helper()
	type envVar struct {
		Name      string `yaml:"name"`
		Value     string `yaml:"value"`
		ValueFrom *struct {
			SecretKeyRef *struct{ Name, Key string } `yaml:"secretKeyRef"`
			FieldRef     *struct {
				FieldPath string `yaml:"fieldPath"`
			} `yaml:"fieldRef"`
		} `yaml:"valueFrom"`
	}
	type manifest struct {
		Kind     string `yaml:"kind"`
		Metadata struct{ Name string }
		Data     map[string]string `yaml:"data"`
		Spec     struct {
			Template struct {
				Spec struct {
					Containers []struct {
						Args         []string `yaml:"args"`
						Env          []envVar `yaml:"env"`
						VolumeMounts []struct {
							Name      string `yaml:"name"`
							MountPath string `yaml:"mountPath"`
						} `yaml:"volumeMounts"`
					} `yaml:"containers"`
					Volumes []struct {
						Name      string                 `yaml:"name"`
						ConfigMap *struct{ Name string } `yaml:"configMap"`
					} `yaml:"volumes"`
				} `yaml:"spec"`
			} `yaml:"template"`
		} `yaml:"spec"`
	}
	files, err := filepath.Glob(filepath.Join(dir, "*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no manifests in %s: %v", dir, err)
	}
	var all []manifest
	for _, f := range files {
		raw, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		dec := yaml.NewDecoder(strings.NewReader(string(raw)))
		for {
			var m manifest
			if err := dec.Decode(&m); err != nil {
				if errors.Is(err, io.EOF) {
					break
				}
				t.Fatalf("%s: %v", f, err)
			}
			all = append(all, m)
		}
	}
	configMaps := map[string]map[string]string{}
	for _, m := range all {
		if m.Kind == "ConfigMap" {
			configMaps[m.Metadata.Name] = m.Data
		}
	}
	out := map[string]container{}
	for _, m := range all {
		if m.Kind != "Deployment" {
			continue
		}
		pod := m.Spec.Template.Spec
		if len(pod.Containers) != 1 {
			t.Fatalf("deployment %s: want one container, got %d", m.Metadata.Name, len(pod.Containers))
		}
		k := pod.Containers[0]
		c := container{args: k.Args, env: map[string]string{}, files: map[string]string{}}
		for _, e := range k.Env {
			switch {
			case e.ValueFrom == nil:
				c.env[e.Name] = e.Value
			case e.ValueFrom.SecretKeyRef != nil:
				ref := e.ValueFrom.SecretKeyRef.Name + "/" + e.ValueFrom.SecretKeyRef.Key
				v, ok := secrets[ref]
				if !ok {
					t.Fatalf("deployment %s: %s comes from secret %s, which the README does not create", m.Metadata.Name, e.Name, ref)
				}
				c.env[e.Name] = v
			case e.ValueFrom.FieldRef != nil:
				v, ok := fields[e.ValueFrom.FieldRef.FieldPath]
				if !ok {
					t.Fatalf("deployment %s: %s comes from field %s, which this test does not give", m.Metadata.Name, e.Name, e.ValueFrom.FieldRef.FieldPath)
				}
				c.env[e.Name] = v
			}
		}
		for _, mount := range k.VolumeMounts {
			for _, vol := range pod.Volumes {
				if vol.Name != mount.Name || vol.ConfigMap == nil {
					continue
				}
				data, ok := configMaps[vol.ConfigMap.Name]
				if !ok {
					t.Fatalf("deployment %s mounts ConfigMap %s, which no manifest defines", m.Metadata.Name, vol.ConfigMap.Name)
				}
				here := t.TempDir()
				for key, body := range data {
					if err := os.WriteFile(filepath.Join(here, key), []byte(body), 0o644); err != nil {
						t.Fatal(err)
					}
					c.files[filepath.Join(mount.MountPath, key)] = filepath.Join(here, key)
				}
			}
		}
		out[m.Metadata.Name] = c
	}
	return out
}

// startDeployNATSCluster runs a deployment's NATS configuration as the
// three-node JetStream cluster it is written for, on this machine: the
// same file loaded by each node, with its own name, ports and store, and
// routes to the other two. It returns the nodes' client URLs.
func startDeployNATSCluster(t *testing.T, config string, env map[string]string) []string {
	t.Helper()
	for k, v := range env {
		t.Setenv(k, v)
	}
	// The nodes' route ports are picked before the nodes start, so that
	// each can name the others; another process may take one in between.
	// Such a cluster is shut down and another started on other ports.
	for try := 1; ; try++ {
		servers, logs := startNATSNodes(t, config, 3)
		var urls []string
		for _, srv := range servers {
			if srv.ReadyForConnections(30 * time.Second) {
				urls = append(urls, srv.ClientURL())
			}
		}
		if len(urls) < len(servers) {
			for _, srv := range servers {
				srv.Shutdown()
			}
			if try == 3 {
				t.Fatalf("a NATS node was not ready, %d times:\n%s", try, logs.String())
			}
			t.Logf("a NATS node was not ready; starting the cluster again:\n%s", logs.String())
			continue
		}
		// Ready as a deployment's would be before gpuq starts: the
		// control plane can place a replicated stream on all three nodes
		// (a meta leader alone is not enough: placement needs every
		// peer's report).
		waitFor(t, 60*time.Second, "the cluster never placed a stream on its three nodes", func() bool {
			return placesOnThree(urls[0], env[queue.PasswordVariable("control")])
		})
		return urls
	}
}

// placesOnThree reports whether the control plane's user can create a
// three-replica file stream at url; the stream is deleted again.
func placesOnThree(url, password string) bool {
	nc, err := nats.Connect(url, nats.UserInfo("control", password))
	if err != nil {
		return false
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return false
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	const probe = "DEPLOY_TEST_READY"
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: probe, Subjects: []string{"deploy.test.ready"},
		Replicas: 3, Storage: jetstream.FileStorage}); err != nil {
		return false
	}
	return js.DeleteStream(ctx, probe) == nil
}

// startNATSNodes starts n nodes of config routed to each other, and
// returns them with their warnings and errors.
func startNATSNodes(t *testing.T, config string, n int) ([]*server.Server, *syncBuffer) {
	t.Helper()
	routes := make([]*url.URL, n)
	for i := range routes {
		routes[i] = &url.URL{Scheme: "nats-route", Host: queuetest.FreeAddr(t)}
	}
	logs := &syncBuffer{}
	servers := make([]*server.Server, n)
	for i := range servers {
		opts, err := server.ProcessConfigFile(config)
		if err != nil {
			t.Fatal(err)
		}
		host, port, _ := net.SplitHostPort(routes[i].Host)
		opts.ServerName = fmt.Sprintf("nats-%d", i+1)
		opts.Host, opts.Port, opts.HTTPPort, opts.StoreDir = "127.0.0.1", server.RANDOM_PORT, 0, t.TempDir()
		opts.Cluster.Host = host
		fmt.Sscan(port, &opts.Cluster.Port) //nolint:errcheck // freeAddr gives a port
		opts.Routes, opts.NoSigs = routes, true
		srv, err := server.NewServer(opts)
		if err != nil {
			t.Fatal(err)
		}
		srv.SetLogger(natsProblems{name: opts.ServerName, w: logs}, false, false)
		go srv.Start()
		t.Cleanup(srv.Shutdown)
		servers[i] = srv
	}
	return servers, logs
}

// natsProblems keeps a NATS server's warnings and errors, and drops the rest.
type natsProblems struct {
	name string
	w    *syncBuffer
}

func (l natsProblems) log(level, format string, v ...any) {
	fmt.Fprintf(l.w, "%s %s: %s\n", l.name, level, fmt.Sprintf(format, v...))
}

func (natsProblems) Noticef(string, ...any)           {}
func (natsProblems) Debugf(string, ...any)            {}
func (natsProblems) Tracef(string, ...any)            {}
func (l natsProblems) Warnf(format string, v ...any)  { l.log("warning", format, v...) }
func (l natsProblems) Errorf(format string, v ...any) { l.log("error", format, v...) }
func (l natsProblems) Fatalf(format string, v ...any) { l.log("fatal", format, v...) }

// startClusterConf runs deploy/nats/cluster.conf as three nodes with a
// random password for each of its users, and returns the nodes' client
// URLs and the passwords by user.
func startClusterConf(t *testing.T) ([]string, map[string]string) {
	t.Helper()
	passwords := map[string]string{}
	env := map[string]string{}
	for _, user := range clusterConfUsers {
		passwords[user] = randomHex(24)
		env[queue.PasswordVariable(user)] = passwords[user]
	}
	return startDeployNATSCluster(t, filepath.Join(deployDir, "nats", "cluster.conf"), env), passwords
}

// TestKubernetesDeploymentRunsAJobAsTheManifestsStartIt runs deploy/kubernetes
// as a cluster would, without Kubernetes: the NATS configuration the README
// points it at (deploy/nats/cluster.conf) as a three-node JetStream
// cluster here, the database its Secret names, each Deployment's container
// with its own args, its environment read from the Secrets the README
// creates and its ConfigMap mounted as files. The server and the CPU pool's
// worker run a job submitted through the HTTP API; the L4 pool's worker,
// on this machine without a GPU, fails its canary and takes no work. Only
// addresses change: the Service names become this machine's ports, and the
// API listens on a free port.
func TestKubernetesDeploymentRunsAJobAsTheManifestsStartIt(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a three-node NATS cluster and a deployment's server and worker processes")
	}
	bin := buildGpuq(t)
	urls, passwords := startClusterConf(t)
	dbURL := deployDatabase(t, "postgres://gpuq:"+randomHex(24)+"@postgres:5432/gpuq?sslmode=disable")
	// The Secrets the README creates, with this deployment's values: its
	// variables are the passwords, and the database is this machine's.
	secrets := readmeSecrets(t, func(name string) string {
		for user, pw := range passwords {
			if queue.PasswordVariable(user) == name {
				return pw
			}
		}
		t.Fatalf("the README's Secrets use $%s, which is no password of cluster.conf", name)
		return ""
	})
	if !strings.HasPrefix(secrets["gpuq-server/database-url"], "postgres://") {
		t.Fatalf("the README's gpuq-server Secret has no database-url: %v", secrets)
	}
	secrets["gpuq-server/database-url"] = dbURL
	deployments := kubeDeployments(t, filepath.Join(deployDir, "kubernetes"), secrets, map[string]string{"spec.nodeName": "node-a"})
	for _, name := range []string{"gpuq-server", "gpuq-worker-k8s-cpu", "gpuq-worker-k8s-l4"} {
		if _, ok := deployments[name]; !ok {
			t.Fatalf("deploy/kubernetes has no Deployment %q", name)
		}
	}
	for name, c := range deployments {
		if name != "gpuq-server" {
			if _, ok := c.env["GPUQ_DATABASE_URL"]; ok {
				t.Errorf("deployment %s holds the database URL", name)
			}
		}
	}
	// The NATS Service balances clients over the nodes: each process here
	// connects to another node.
	node := 0
	swap := func(v string) string {
		if v != "nats://nats:4222" {
			return v
		}
		node++
		return urls[node%len(urls)]
	}
	serverEnv, base := startDeployedServer(t, bin, deployments["gpuq-server"], swap)
	l4 := startDeployed(t, bin, deployments["gpuq-worker-k8s-l4"], swap)
	worker := startDeployed(t, bin, deployments["gpuq-worker-k8s-cpu"], swap)
	waitFor(t, 60*time.Second, "the k8s-cpu worker never passed its canary", func() bool {
		return strings.Contains(worker.logs.String(), "canary passed")
	})
	waitFor(t, 60*time.Second, "the k8s-l4 worker did not refuse work on a node without its GPU", func() bool {
		return strings.Contains(l4.logs.String(), "canary failed: taking no work")
	})
	submitThroughTheAPI(t, bin, serverEnv, base, "ran-in-kubernetes")
}

// systemdCommand returns the gpuq arguments of a unit's ExecStart, with
// its instance name for %i.
func systemdCommand(t *testing.T, unit, instance string) []string {
	t.Helper()
	raw, err := os.ReadFile(unit)
	if err != nil {
		t.Fatal(err)
	}
	var exec string
	for _, line := range strings.Split(string(raw), "\n") {
		if v, ok := strings.CutPrefix(line, "ExecStart="); ok {
			exec = v
		}
	}
	fields := strings.Fields(strings.ReplaceAll(exec, "%i", instance))
	if len(fields) == 0 || fields[0] != "/usr/local/bin/gpuq" {
		t.Fatalf("%s: ExecStart %q does not run /usr/local/bin/gpuq", unit, exec)
	}
	return fields[1:]
}

// systemdService returns the keys of a unit's [Service] section.
func systemdService(t *testing.T, unit string) map[string]string {
	t.Helper()
	raw, err := os.ReadFile(unit)
	if err != nil {
		t.Fatal(err)
	}
	keys := map[string]string{}
	section := ""
	for _, line := range strings.Split(string(raw), "\n") {
		line = strings.TrimSpace(line)
		switch {
		case line == "" || strings.HasPrefix(line, "#"):
		case strings.HasPrefix(line, "["):
			section = line
		case section == "[Service]":
			if k, v, ok := strings.Cut(line, "="); ok {
				keys[k] = v
			}
		}
	}
	return keys
}

// The worker unit stops the worker as a container cloud stops it: SIGTERM
// to the worker alone, which forwards it to each job once and hands the
// jobs back within its grace, well inside the unit's stop timeout. With
// systemd's default KillMode, every job would get SIGTERM from systemd as
// well, and a job's checkpoint handler could run twice at once.
func TestWorkerUnitSignalsTheWorkerOnlyAndWaitsOutItsGrace(t *testing.T) {
	t.Parallel()
	svc := systemdService(t, filepath.Join(deployDir, "systemd", "gpuq-worker@.service"))
	if svc["KillSignal"] != "SIGTERM" || svc["KillMode"] != "mixed" {
		t.Fatalf("the worker unit stops with KillSignal=%q KillMode=%q, want SIGTERM to the worker only (mixed)", svc["KillSignal"], svc["KillMode"])
	}
	timeout, err := time.ParseDuration(svc["TimeoutStopSec"] + "s")
	if err != nil {
		t.Fatalf("TimeoutStopSec=%q: %v", svc["TimeoutStopSec"], err)
	}
	grace := newWorkerCmd().Flags().Lookup("grace").DefValue
	if g, _ := time.ParseDuration(grace); timeout < g+10*time.Second {
		t.Fatalf("TimeoutStopSec %s leaves the worker under 10s past its grace %s to record and hand back", timeout, grace)
	}
}

// cloudInitFiles returns the files a cloud-config writes, by path, with
// each placeholder of fill replaced.
func cloudInitFiles(t *testing.T, path string, fill map[string]string) map[string]string {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		WriteFiles []struct{ Path, Content string } `yaml:"write_files"`
	}
	if err := yaml.Unmarshal(raw, &doc); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	out := map[string]string{}
	for _, f := range doc.WriteFiles {
		body := f.Content
		for k, v := range fill {
			body = strings.ReplaceAll(body, k, v)
		}
		if strings.Contains(body, "__") {
			t.Fatalf("%s: %s keeps a placeholder this test does not fill:\n%s", path, f.Path, body)
		}
		out[f.Path] = body
	}
	return out
}

// TestCloudInitWorkerReachesTheControlPlaneAsItsSystemdUnitRunsIt boots a
// worker as deploy/cloud-init/worker.yaml and deploy/systemd describe a
// hand-built machine: the files the cloud-config writes, the worker unit's
// command line for the pool, its EnvironmentFile, against
// deploy/nats/cluster.conf run as three nodes and a server started as its
// own unit starts it. The template's pool expects an H100, so on this
// machine its canary fails; the control plane records the failure under
// the machine's instance id, which only a worker that connected with the
// template's credential can have reported.
func TestCloudInitWorkerReachesTheControlPlaneAsItsSystemdUnitRunsIt(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a three-node NATS cluster, a server and a worker process")
	}
	bin := buildGpuq(t)
	urls, passwords := startClusterConf(t)
	const pool, instance = "aws-fra-l4-spot", "i-0cloudinit"
	files := cloudInitFiles(t, filepath.Join(deployDir, "cloud-init", "worker.yaml"), map[string]string{
		"__POOL__": pool, "__INSTANCE_ID__": instance, "__NATS_PASSWORD__": passwords["worker."+pool+".eu-central-1"]})
	workerConfig := filepath.Join(t.TempDir(), "gpuq.yaml")
	if err := os.WriteFile(workerConfig, []byte(files["/etc/gpuq/gpuq.yaml"]), 0o600); err != nil {
		t.Fatal(err)
	}
	workerEnv := []string{"PATH=" + os.Getenv("PATH"), "HOME=" + t.TempDir()}
	for _, line := range strings.Split(files["/etc/gpuq/worker.env"], "\n") {
		k, v, ok := strings.Cut(strings.TrimSpace(line), "=")
		if !ok || strings.HasPrefix(k, "#") {
			continue
		}
		if k == "GPUQ_NATS_URL" {
			v = urls[1]
		}
		workerEnv = append(workerEnv, k+"="+v)
	}

	dbURL := deployDatabase(t, "postgres://gpuq:"+randomHex(24)+"@db.example.internal:5432/gpuq?sslmode=disable")
	serverEnv := []string{"PATH=" + os.Getenv("PATH"), "HOME=" + t.TempDir(), "GPUQ_NATS_URL=" + urls[0],
		"GPUQ_NATS_CREDENTIAL=control:" + passwords["control"], "GPUQ_DATABASE_URL=" + dbURL}
	serverConfig := writeFile(t, "server.yaml", "pools:\n  - {pool: "+pool+", region: eu-central-1, country: DE, card: L4, gpu_count: 1}\n")
	api := queuetest.FreeAddr(t)
	args := systemdCommand(t, filepath.Join(deployDir, "systemd", "gpuq-server.service"), "")
	for i, a := range args {
		switch a {
		case "/etc/gpuq/gpuq.yaml":
			args[i] = serverConfig
		case "127.0.0.1:8080":
			args[i] = api
		}
	}
	server := startProcEnv(t, bin, serverEnv, args...)
	waitHealthy(t, "http://"+api, server)

	args = systemdCommand(t, filepath.Join(deployDir, "systemd", "gpuq-worker@.service"), pool)
	for i, a := range args {
		if a == "/etc/gpuq/gpuq.yaml" {
			args[i] = workerConfig
		}
	}
	worker := startProcEnv(t, bin, workerEnv, args...)
	waitFor(t, 60*time.Second, "the worker did not refuse work on a machine without the H100 its pool expects", func() bool {
		select {
		case <-worker.done:
			t.Fatalf("the worker exited:\n%s", worker.logs.String())
		default:
		}
		return strings.Contains(worker.logs.String(), "canary failed: taking no work")
	})
	waitFor(t, 30*time.Second, "the control plane recorded no failed canary of the machine", func() bool {
		var nodes []queue.Node
		out := runDeployed(t, bin, serverEnv, "nodes", "-o", "json")
		if err := json.Unmarshal([]byte(out), &nodes); err != nil {
			t.Fatalf("nodes -o json: %v\n%s", err, out)
		}
		return slices.ContainsFunc(nodes, func(n queue.Node) bool {
			return n.ID == instance && n.Pool == pool && n.LastCanaryOK != nil && !*n.LastCanaryOK
		})
	})
}

// readme is the repository's README.
func readme(t *testing.T) string {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join("..", "..", "..", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	return string(raw)
}

// readmeEnvLoop is the README's loop that writes deploy/compose/.env.
var readmeEnvLoop = regexp.MustCompile(`(?s)for v in (.*?); do\s*\n\s*echo "\$v=\$\(openssl rand -hex 24\)"; done > \.env`)

// readmeSecret is one --from-literal of the README's `kubectl create
// secret generic` commands.
var readmeSecret = regexp.MustCompile(`kubectl create secret generic ([a-z0-9-]+)|--from-literal=([a-z-]+)="([^"]*)"`)

// readmeSecrets returns the Secrets the README's kubectl commands create,
// by "name/key", each value with its $VARIABLES read from vars.
func readmeSecrets(t *testing.T, vars func(string) string) map[string]string {
	t.Helper()
	out := map[string]string{}
	name := ""
	for _, m := range readmeSecret.FindAllStringSubmatch(readme(t), -1) {
		if m[1] != "" {
			name = m[1]
			continue
		}
		out[name+"/"+m[2]] = os.Expand(m[3], vars)
	}
	if len(out) == 0 {
		t.Fatal("README.md creates no Kubernetes Secret")
	}
	return out
}
