package httpapi_test

import (
	"bufio"
	"context"
	"net"
	"net/http"
	"strings"
	"testing"

	"github.com/gpuq/gpuq/queue"
	"github.com/gpuq/gpuq/queue/control/httpapi"
	"github.com/gpuq/gpuq/workers"
)

// A server that stops ends the event streams it serves at once, so that
// Serve returns cleanly (a client reopens its stream where it left off)
// rather than waiting out its shutdown timeout for streams that would
// notice only at their next keep-alive.
func TestServeEndsOpenEventStreamsWhenItStops(t *testing.T) {
	t.Parallel()
	e := startEnv(t, nil)
	tok := e.token(queue.RoleSubmit, nil, "default")
	job := e.submit(tok, "name: long\ncommand: [sleep, \"60\"]\n")
	srv, err := httpapi.New(httpapi.Config{Store: e.Store, JS: e.NATS.JS, NATS: e.NATS.NC, Archives: &workers.ObjectStore{JS: e.NATS.JS}})
	if err != nil {
		t.Fatal(err)
	}
	addr, stop := serve(t, srv)
	var bodies []*http.Response
	for _, path := range []string{"/events", "/logs?follow=true"} {
		req, _ := http.NewRequest("GET", "http://"+addr+"/v1/jobs/"+job.ID.String()+path, nil)
		req.Header.Set("Authorization", "Bearer "+tok)
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		if res.StatusCode != http.StatusOK {
			t.Fatalf("GET %s: %d", path, res.StatusCode)
		}
		bodies = append(bodies, res)
	}
	// The events stream is open once it sent the job's first event.
	line, err := bufio.NewReader(bodies[0].Body).ReadString('\n')
	if err != nil || !strings.HasPrefix(line, "id: ") {
		t.Fatalf("the events stream's first line: %q, %v", line, err)
	}
	if err := stop(); err != nil {
		t.Fatalf("Serve with open streams: %v, want them ended and a clean return", err)
	}
}

// serve runs srv.Serve on a free local port, as gpuq server does, and
// returns its address and a stop that ends it and returns what Serve did.
func serve(t *testing.T, srv *httpapi.Server) (string, func() error) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ctx, ln) }()
	return ln.Addr().String(), func() error {
		cancel()
		return <-served
	}
}
