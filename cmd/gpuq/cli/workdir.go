package cli

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"

	"github.com/spf13/cobra"
	"github.com/spf13/viper"

	"github.com/gpuq/gpuq/queue"
	"github.com/gpuq/gpuq/queue/control/httpapi"
	"github.com/gpuq/gpuq/workers"
)

// workdirs packs and uploads the local directories that specs name as their
// workdir (--workdir, or workdir: in a spec file), each directory once per
// project, and puts the digest the server knows it by in their place.
type workdirs struct {
	cmd  *cobra.Command
	v    *viper.Viper
	api  *apiJobs
	done map[[2]string]string
}

func newWorkdirs(cmd *cobra.Command, v *viper.Viper) *workdirs {
	return &workdirs{cmd: cmd, v: v, done: map[[2]string]string{}}
}

// localWorkdir reports whether doc's workdir names a local directory rather
// than an uploaded one.
func localWorkdir(doc map[string]any) (string, bool) {
	dir, ok := doc["workdir"].(string)
	if !ok || dir == "" {
		return "", false
	}
	if _, uploaded := queue.WorkdirDigest(dir); uploaded {
		return "", false
	}
	return dir, true
}

// resolve replaces doc's workdir, when it names a local directory (relative
// to base, the spec file's directory), by the digest of that directory
// uploaded for doc's project.
func (w *workdirs) resolve(ctx context.Context, doc map[string]any, base string) error {
	dir, ok := localWorkdir(doc)
	if !ok {
		return nil
	}
	if !filepath.IsAbs(dir) && base != "" {
		dir = filepath.Join(base, dir)
	}
	project, _ := doc["project"].(string)
	key := [2]string{dir, project}
	if digest, ok := w.done[key]; ok {
		doc["workdir"] = digest
		return nil
	}
	warn := func(msg string) { fmt.Fprintf(w.cmd.ErrOrStderr(), "gpuq: workdir %s: %s\n", dir, msg) }
	packed, err := workers.PackWorkdir(dir, "", queue.DefaultWorkdirMaxBytes, warn)
	if err != nil {
		return err
	}
	defer packed.Remove() //nolint:errcheck // a temporary file
	if err := w.upload(ctx, packed, project); err != nil {
		return fmt.Errorf("uploading workdir %s: %w", dir, err)
	}
	w.done[key] = packed.Digest()
	doc["workdir"] = packed.Digest()
	return nil
}

// upload sends packed to the HTTP API for project (the token's own when
// empty).
func (w *workdirs) upload(ctx context.Context, packed *workers.Workdir, project string) error {
	if w.api == nil {
		svc, err := connectJobs(w.cmd, w.v)
		if err != nil {
			return err
		}
		api, ok := svc.(*apiJobs)
		if !ok {
			svc.Close()
			return errors.New("a working directory is uploaded through the HTTP API: set GPUQ_URL and GPUQ_TOKEN " +
				"(or url: and token: in the config file; gpuq dev's directory has them)")
		}
		w.api = api
	}
	data, err := os.ReadFile(packed.Path)
	if err != nil {
		return err
	}
	q := url.Values{}
	if project != "" {
		q.Set("project", project)
	}
	shown := newTransfer(w.cmd.ErrOrStderr(), "uploading workdir")
	defer shown.close()
	body := io.TeeReader(bytes.NewReader(data), shown.writer(int64(len(data))))
	var answer httpapi.Workdir
	return w.api.call(ctx, http.MethodPut, "/v1/workdirs/"+packed.SHA256, q, body, "application/gzip", &answer)
}

// close closes the connection an upload opened.
func (w *workdirs) close() {
	if w.api != nil {
		w.api.Close()
	}
}
