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

func newWorkdirCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "workdir",
		Short: "Upload a directory for jobs to run in (gpuq submit --workdir does it for each submission)",
	}
	upload := &cobra.Command{
		Use:   "upload DIR",
		Short: "Pack and upload DIR for a project's jobs; prints the digest a spec's workdir names it by",
		Long: `upload packs DIR as gpuq submit --workdir packs it (leaving out .git, .gpuq,
__pycache__, .ipynb_checkpoints, .venv and what its .gpuqignore names), uploads
it for the project through the HTTP API, and prints sha256:<digest>, which a
spec's workdir may name. Uploading the same files again keeps them longer
(storage.workdir_retention after the last upload), and lets a job whose
directory was deleted since be retried.`,
		Example: `  gpuq workdir upload ~/proj --project vision
  gpuq retry 01a2490c-414b-74a6-950b-948f7b68feb6   # once its directory is uploaded again`,
		Args: exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			v, format, err := loadConfigFormat(cmd)
			if err != nil {
				return err
			}
			wd := newWorkdirs(cmd, v)
			defer wd.close()
			doc := map[string]any{"workdir": args[0]}
			if project := v.GetString("project"); project != "" {
				if err := queue.ValidateProject(project); err != nil {
					return fmt.Errorf("--project: %w", err)
				}
				doc["project"] = project
			}
			if _, local := localWorkdir(doc); !local {
				return fmt.Errorf("upload takes a local directory, got %q", args[0])
			}
			if err := wd.resolve(cmd.Context(), doc, ""); err != nil {
				return err
			}
			if format == "json" {
				return writeJSON(cmd.OutOrStdout(), wd.answer)
			}
			_, err = fmt.Fprintln(cmd.OutOrStdout(), doc["workdir"])
			return err
		},
	}
	jobFlags(upload)
	upload.Flags().String("project", "", "the project whose jobs may name it (default: the token's project, else default)")
	cmd.AddCommand(upload)
	return cmd
}

// workdirs packs and uploads the local directories that specs name as their
// workdir (--workdir, or workdir: in a spec file), each directory once per
// project, and puts the digest the server knows it by in their place.
type workdirs struct {
	cmd  *cobra.Command
	v    *viper.Viper
	api  *apiJobs
	done map[[2]string]string
	// answer is the server's answer to the latest upload.
	answer *httpapi.Workdir
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
	w.answer = &httpapi.Workdir{}
	return w.api.call(ctx, http.MethodPut, "/v1/workdirs/"+packed.SHA256, q, body, "application/gzip", w.answer)
}

// close closes the connection an upload opened.
func (w *workdirs) close() {
	if w.api != nil {
		w.api.Close()
	}
}
