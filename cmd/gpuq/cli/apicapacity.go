package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/viper"

	"github.com/gpuq/gpuq/queue"
)

// The capacity and admin commands (instances, spend, token) read the
// system of record directly on the control-plane host, and go through the
// HTTP API when one is configured, so that an admin's laptop needs no
// database access.

// apiFlag adds --url to a command that otherwise takes the database URL.
func apiFlag(cmd *cobra.Command) {
	cmd.Flags().String("url", "", "gpuq HTTP API URL (env GPUQ_URL; token from GPUQ_TOKEN or the config file's token key); used unless --database-url is on the command line")
}

// viaAPI reports whether a capacity command goes through the HTTP API: an
// API URL is configured (--url, GPUQ_URL or the config file) and
// --database-url is not on the command line.
func viaAPI(cmd *cobra.Command, v *viper.Viper) bool {
	return v.GetString("url") != "" && !cmd.Flags().Changed("database-url")
}

// raw sends a request and returns the JSON answer as the API wrote it.
func (a *apiJobs) raw(ctx context.Context, method, path string, query url.Values, body any) ([]byte, error) {
	var r io.Reader
	contentType := ""
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return nil, err
		}
		r, contentType = bytes.NewReader(b), "application/json"
	}
	resp, err := a.do(ctx, method, path, query, r, contentType, "application/json")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, maxDocBytes+1))
	if err != nil {
		return nil, fmt.Errorf("%s %s: reading the answer: %w", method, path, err)
	}
	if len(data) > maxDocBytes {
		return nil, fmt.Errorf("%s %s: answer over %d bytes", method, path, maxDocBytes)
	}
	return data, nil
}

// getDoc fetches a JSON document and decodes it into out; it returns the
// document as the API wrote it, for -o json.
func (a *apiJobs) getDoc(ctx context.Context, path string, query url.Values, out any) ([]byte, error) {
	data, err := a.raw(ctx, http.MethodGet, path, query, nil)
	if err != nil {
		return nil, err
	}
	if err := json.Unmarshal(data, out); err != nil {
		return nil, fmt.Errorf("GET %s: reading the answer: %w", path, err)
	}
	return data, nil
}

// getAPIDoc is getDoc through a client of its own for one request: the
// document at path, decoded into out, and as the API wrote it.
func getAPIDoc(ctx context.Context, v *viper.Viper, path string, query url.Values, out any) ([]byte, error) {
	a, err := newAPIJobs(v)
	if err != nil {
		return nil, err
	}
	defer a.Close()
	return a.getDoc(ctx, path, query, out)
}

// writeRawJSON prints a JSON document the API answered, indented as
// writeJSON indents.
func writeRawJSON(w io.Writer, data []byte) error {
	var buf bytes.Buffer
	if err := json.Indent(&buf, bytes.TrimSpace(data), "", "  "); err != nil {
		return err
	}
	buf.WriteByte('\n')
	_, err := w.Write(buf.Bytes())
	return err
}

// InstanceEvents follows the instance events the API streams, from the
// stream sequence after (0: only new ones), calling fn with each and its
// sequence until fn returns false or ctx ends.
func (a *apiJobs) InstanceEvents(ctx context.Context, pool string, after uint64, fn func(seq uint64, raw []byte, ev queue.InstanceEvent) bool) error {
	q := url.Values{}
	if pool != "" {
		q.Set("pool", pool)
	}
	var last string
	if after > 0 {
		last = strconv.FormatUint(after, 10)
	}
	return a.streamAfter(ctx, "/v1/instances/events", q, last, func(e sseEvent) (bool, error) {
		if e.Event != "state" {
			return true, nil
		}
		var ev queue.InstanceEvent
		if err := json.Unmarshal(e.Data, &ev); err != nil {
			return false, fmt.Errorf("instance events: %w", err)
		}
		seq, _ := strconv.ParseUint(e.ID, 10, 64)
		return fn(seq, e.Data, ev), nil
	})
}

// tokenNotFound gives a missing token its exit status.
func tokenNotFound(id string, err error) error {
	if errors.Is(err, queue.ErrNotFound) {
		return &ExitError{Code: ExitNotFound, Err: fmt.Errorf("token %s not found", id)}
	}
	return err
}

// projectNotFound gives a project the token does not cover its exit status.
func projectNotFound(project string, err error) error {
	if errors.Is(err, queue.ErrNotFound) {
		return &ExitError{Code: ExitNotFound, Err: fmt.Errorf("project %s not found (or not one of this token's)", strings.TrimSpace(project))}
	}
	return err
}
