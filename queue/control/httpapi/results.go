package httpapi

import (
	"archive/tar"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path"
	"strconv"

	"github.com/danielgtaylor/huma/v2"
	"github.com/google/uuid"
	"github.com/klauspost/compress/zstd"

	"github.com/gpuq/gpuq/queue"
)

// ResultFile is one regular file among a job's outputs.
type ResultFile struct {
	Path  string `json:"path"`
	Bytes int64  `json:"bytes"`
}

// Results describes a succeeded job's outputs: the archive and its files.
// A job that wrote no outputs has none.
type Results struct {
	JobID  uuid.UUID    `json:"job_id"`
	Bytes  int64        `json:"bytes"`
	SHA256 string       `json:"sha256,omitempty"`
	Region string       `json:"region,omitempty"`
	Files  []ResultFile `json:"files"`
}

type resultFileInput struct {
	ID   uuid.UUID `path:"id" doc:"job id"`
	Path string    `query:"path" required:"true" minLength:"1" maxLength:"4096" doc:"the file's path inside $GPUQ_OUTPUT_DIR, as listed"`
}

type resultsOutput struct {
	Body *Results
}

func (s *Server) registerResults(api huma.API) {
	register(api, huma.Operation{
		OperationID: "list-job-results", Errors: []int{404, 409, 410, 422}, Method: http.MethodGet, Path: "/v1/jobs/{id}/results", Tags: []string{"results"},
		Summary:     "List a succeeded job's output files",
		Description: "409 when the job has not succeeded; 410 when its outputs are recorded but their archive is lost. A succeeded job that wrote no outputs lists no files.",
		Metadata:    map[string]any{metaRole: queue.RoleRead},
	}, s.listResults)
	register(api, huma.Operation{
		OperationID: "download-job-results", Errors: []int{404, 409, 410, 422}, Method: http.MethodGet, Path: "/v1/jobs/{id}/results/archive", Tags: []string{"results"},
		Summary:     "Download a succeeded job's outputs as one tar+zstd archive",
		Description: "The archive's SHA-256 is checked before it is sent, and sent as X-Gpuq-Sha256; 410 when the archive is lost (gone from its bucket, or not matching its record).",
		Responses: map[string]*huma.Response{"200": {Description: "the archive", Content: map[string]*huma.MediaType{
			"application/zstd": {Schema: &huma.Schema{Type: huma.TypeString, Format: "binary"}}}}},
		Metadata: map[string]any{metaRole: queue.RoleRead},
	}, s.resultArchive)
	register(api, huma.Operation{
		OperationID: "get-job-result-file", Errors: []int{404, 409, 410, 422}, Method: http.MethodGet, Path: "/v1/jobs/{id}/results/file", Tags: []string{"results"},
		Summary: "Download one of a succeeded job's output files",
		Responses: map[string]*huma.Response{"200": {Description: "the file", Content: map[string]*huma.MediaType{
			"application/octet-stream": {Schema: &huma.Schema{Type: huma.TypeString, Format: "binary"}}}}},
		Metadata: map[string]any{metaRole: queue.RoleRead},
	}, s.resultFile)
}

// result returns a succeeded job's output record, nil when it wrote none.
func (s *Server) result(ctx context.Context, id uuid.UUID) (*queue.ArchiveRecord, error) {
	job, err := s.ownJob(ctx, id)
	if err != nil {
		return nil, err
	}
	if job.State != queue.StateSucceeded {
		return nil, huma.Error409Conflict(fmt.Sprintf("job %s has no results: it is %s, not succeeded", id, job.State))
	}
	rec, err := s.cfg.Store.Result(ctx, id)
	if errors.Is(err, queue.ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, internal(s.cfg.Logger, "reading results", err)
	}
	return rec, nil
}

// download fetches an archive into a temporary file, checks its hash and
// rewinds it; the caller removes the file.
func (s *Server) download(ctx context.Context, rec *queue.ArchiveRecord) (*os.File, error) {
	f, err := os.CreateTemp("", "gpuq-api-*.tar.zst")
	if err != nil {
		return nil, internal(s.cfg.Logger, "downloading results", err)
	}
	h := sha256.New()
	if err := s.cfg.Archives.Get(ctx, rec.StoreURI, io.MultiWriter(f, h)); err != nil {
		closeRemove(f)
		if errors.Is(err, queue.ErrArchiveLost) {
			return nil, outputsLost(err)
		}
		return nil, internal(s.cfg.Logger, "downloading results", err)
	}
	if got := hex.EncodeToString(h.Sum(nil)); got != rec.SHA256 {
		closeRemove(f)
		return nil, outputsLost(fmt.Errorf("archive %s: %w: sha256 %s, recorded %s", rec.StoreURI, queue.ErrArchiveLost, got, rec.SHA256))
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		closeRemove(f)
		return nil, internal(s.cfg.Logger, "downloading results", err)
	}
	return f, nil
}

// outputsLost is a 410: the job's outputs are recorded, but their archive
// is gone from its bucket or no longer what was recorded.
func outputsLost(err error) error {
	return huma.Error410Gone("the job's outputs are recorded, but " + err.Error())
}

func closeRemove(f *os.File) {
	f.Close()
	os.Remove(f.Name())
}

// eachFile calls fn with each regular file of a tar+zstd archive until fn
// returns false.
func eachFile(r io.Reader, fn func(hdr *tar.Header, body io.Reader) (bool, error)) error {
	zr, err := zstd.NewReader(r)
	if err != nil {
		return err
	}
	defer zr.Close()
	tr := tar.NewReader(zr)
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		if hdr.Typeflag != tar.TypeReg {
			continue
		}
		more, err := fn(hdr, tr)
		if err != nil || !more {
			return err
		}
	}
}

func (s *Server) listResults(ctx context.Context, in *jobInput) (*resultsOutput, error) {
	rec, err := s.result(ctx, in.ID)
	if err != nil {
		return nil, err
	}
	out := &Results{JobID: in.ID, Files: []ResultFile{}}
	if rec == nil {
		return &resultsOutput{Body: out}, nil
	}
	out.Bytes, out.SHA256, out.Region = rec.Bytes, rec.SHA256, rec.Region
	f, err := s.download(ctx, rec)
	if err != nil {
		return nil, err
	}
	defer closeRemove(f)
	err = eachFile(f, func(hdr *tar.Header, _ io.Reader) (bool, error) {
		out.Files = append(out.Files, ResultFile{Path: path.Clean(hdr.Name), Bytes: hdr.Size})
		return true, nil
	})
	if err != nil {
		return nil, internal(s.cfg.Logger, "reading results", err)
	}
	return &resultsOutput{Body: out}, nil
}

func (s *Server) resultArchive(ctx context.Context, in *jobInput) (*huma.StreamResponse, error) {
	rec, err := s.result(ctx, in.ID)
	if err != nil {
		return nil, err
	}
	if rec == nil {
		return nil, huma.Error404NotFound(fmt.Sprintf("job %s succeeded without writing outputs", in.ID))
	}
	f, err := s.download(ctx, rec)
	if err != nil {
		return nil, err
	}
	return &huma.StreamResponse{Body: func(hctx huma.Context) {
		defer closeRemove(f)
		hctx.SetHeader("Content-Type", "application/zstd")
		hctx.SetHeader("Content-Length", strconv.FormatInt(rec.Bytes, 10))
		hctx.SetHeader("Content-Disposition", `attachment; filename="`+in.ID.String()+`.tar.zst"`)
		hctx.SetHeader("X-Gpuq-Sha256", rec.SHA256)
		hctx.SetStatus(http.StatusOK)
		io.Copy(hctx.BodyWriter(), f) //nolint:errcheck // the client went away
	}}, nil
}

func (s *Server) resultFile(ctx context.Context, in *resultFileInput) (*huma.StreamResponse, error) {
	rec, err := s.result(ctx, in.ID)
	if err != nil {
		return nil, err
	}
	notFound := huma.Error404NotFound(fmt.Sprintf("job %s has no output file %q", in.ID, in.Path))
	if rec == nil {
		return nil, notFound
	}
	f, err := s.download(ctx, rec)
	if err != nil {
		return nil, err
	}
	// The file is found first so that a missing one is a 404, then sent
	// from a second pass over the archive.
	var size int64 = -1
	want := path.Clean(in.Path)
	err = eachFile(f, func(hdr *tar.Header, _ io.Reader) (bool, error) {
		if path.Clean(hdr.Name) == want {
			size = hdr.Size
			return false, nil
		}
		return true, nil
	})
	if err != nil || size < 0 {
		closeRemove(f)
		if err != nil {
			return nil, internal(s.cfg.Logger, "reading results", err)
		}
		return nil, notFound
	}
	return &huma.StreamResponse{Body: func(hctx huma.Context) {
		defer closeRemove(f)
		if _, err := f.Seek(0, io.SeekStart); err != nil {
			return
		}
		hctx.SetHeader("Content-Type", "application/octet-stream")
		hctx.SetHeader("Content-Length", strconv.FormatInt(size, 10))
		hctx.SetStatus(http.StatusOK)
		eachFile(f, func(hdr *tar.Header, body io.Reader) (bool, error) { //nolint:errcheck // the client went away
			if path.Clean(hdr.Name) != want {
				return true, nil
			}
			_, err := io.Copy(hctx.BodyWriter(), body)
			return false, err
		})
	}}, nil
}
