"""Parts of the client that need no server: progress display, problem
details, configuration, file paths, times, the checkpoint protocol's
refusal outside a job, and packing a job's working directory."""

from __future__ import annotations

import contextlib
import copy
import gzip
import hashlib
import http.server
import io
import json
import os
import pathlib
import re
import tarfile
import tempfile
import threading
import time
import traceback
import unittest
import urllib.parse
from unittest import mock

import gpuq
import gpuq.workdir
from gpuq.client import _inside, _merged, _read_config, _result_dirs
from gpuq.errors import api_error
from gpuq.progress import Progress, Sweep, Transfer, byte_count
from gpuq.types import Event, parse_time


def ev(state, attempt=0, message=""):
    return Event(job_id="j", at=None, state=state, attempt=attempt, message=message)


class FakeTerminal(io.StringIO):
    def isatty(self):
        return True


def fake_notebook():
    """IPython's display function as a notebook has it, and the list of what
    it was asked to show: ("display", text), then ("update", text)."""
    shown = []

    class Handle:
        def update(self, obj):
            shown.append(("update", repr(obj)))

    def display(obj, display_id=False):
        shown.append(("display", repr(obj)))
        return Handle()

    return display, shown


class ProgressTest(unittest.TestCase):
    def test_a_pipe_gets_one_plain_line_per_state_change(self):
        out = io.StringIO()
        p = Progress("0123456789abcdef", stream=out)
        self.assertEqual(p.mode, "lines")
        for e in (ev("placed"), ev("running", 1), ev("running", 1), ev("succeeded", 1)):
            p.event(e)
        p.close()
        lines = out.getvalue().splitlines()
        self.assertEqual([l.split()[1] for l in lines], ["placed", "running", "succeeded"])
        self.assertNotIn("\r", out.getvalue())
        self.assertNotIn("\033", out.getvalue())

    def test_a_terminal_gets_one_line_redrawn_with_elapsed_time_ticking(self):
        out = FakeTerminal()
        with mock.patch.object(Progress, "TICK", 0.2):
            p = Progress("0123456789abcdef", stream=out)
            self.assertEqual(p.mode, "tty")
            p.event(ev("running", 1, "claimed"))
            time.sleep(1.3)
            p.close()
        text = out.getvalue()
        draws = text.rstrip("\n").split("\r\033[K")[1:]
        self.assertGreaterEqual(len(draws), 4, text)
        self.assertIn(" 0s ", draws[0])
        self.assertIn(" 1s ", draws[-1])
        # The end of the id: a UUIDv7's leading digits are the time.
        self.assertTrue(draws[0].startswith("…456789abcdef  running "), draws[0])
        self.assertEqual(text.count("\n"), 1)

    def test_a_notebook_updates_one_display(self):
        display, shown = fake_notebook()
        with mock.patch("gpuq.progress._notebook_display", return_value=display):
            p = Progress("0123456789abcdef", stream=io.StringIO())
            self.assertEqual(p.mode, "notebook")
            p.event(ev("placed"))
            p.event(ev("running", 1))
            p.close()
        self.assertEqual([k for k, _ in shown][:2], ["display", "update"])
        self.assertIn("running", shown[-1][1])


    def test_in_ipython_one_display_is_updated_in_place(self):
        # IPython's own display machinery, as a Jupyter kernel's shell runs
        # it: display(..., display_id=True) and then updates of that display,
        # published to the front end. Only the kernel is absent: gpuq knows a
        # kernel's shell by its ``kernel`` attribute.
        try:
            from IPython.core.displaypub import CapturingDisplayPublisher
            from IPython.core.interactiveshell import InteractiveShell
            from traitlets.config import Config
        except ImportError:
            if os.environ.get("CI") == "true":
                raise
            self.skipTest("IPython is not installed (Debian: python3-ipython)")
        with tempfile.TemporaryDirectory() as ipdir, mock.patch.dict(os.environ, {"IPYTHONDIR": ipdir}):
            config = Config()
            config.HistoryManager.enabled = False
            shell = InteractiveShell.instance(config=config)
            try:
                shell.display_pub = CapturingDisplayPublisher()
                shell.kernel = object()
                p = Progress("0123456789abcdef", stream=io.StringIO())
                self.assertEqual(p.mode, "notebook")
                p.event(ev("placed"))
                p.event(ev("running", 1, "claimed by w1"))
                p.close()
                outputs = shell.display_pub.outputs
            finally:
                InteractiveShell.clear_instance()
        self.assertGreaterEqual(len(outputs), 2)
        ids = {o["transient"]["display_id"] for o in outputs}
        self.assertEqual(len(ids), 1, "every draw must target the one display")
        self.assertEqual([o["update"] for o in outputs[:2]], [False, True])
        self.assertIn("placed", outputs[0]["data"]["text/plain"])
        last = outputs[-1]["data"]["text/plain"]
        self.assertIn("running", last)
        self.assertIn("claimed by w1", last)
        self.assertNotIn("\r", last)

class TransferTest(unittest.TestCase):
    def run_transfer(self, stream, steps, step, mode=None):
        now = [100.0]
        t = Transfer("downloading the outputs of j", steps << 20, stream=stream, mode=mode, clock=lambda: now[0])
        for _ in range(steps):
            now[0] += step
            t.add(1 << 20)
        t.close()
        return t

    def test_a_short_download_shows_nothing(self):
        out = io.StringIO()
        self.run_transfer(out, 9, 0.1)
        self.assertEqual(out.getvalue(), "")

    def test_a_long_download_is_a_line_every_few_seconds_and_its_end(self):
        out = io.StringIO()
        self.run_transfer(out, 12, 1.0)
        self.assertEqual(out.getvalue().splitlines(), [
            "downloading the outputs of j: 1.0 MiB of 12 MiB (8%), 1s",
            "downloading the outputs of j: 6.0 MiB of 12 MiB (50%), 6s",
            "downloading the outputs of j: 11 MiB of 12 MiB (91%), 11s",
            "downloading the outputs of j: 12 MiB of 12 MiB (100%), 12s",
        ])

    def test_a_count_of_jobs_is_shown_as_a_count(self):
        # Client.submit_many: 500 jobs a request.
        out = io.StringIO()
        now = [0.0]
        t = Transfer("submit_many: jobs submitted", 1200, stream=out, clock=lambda: now[0], count="{:,}".format)
        for n in (500, 500, 200):
            now[0] += 0.8
            t.add(n)
        t.close()
        self.assertEqual(out.getvalue().splitlines(), [
            "submit_many: jobs submitted: 1,000 of 1,200 (83%), 2s",
            "submit_many: jobs submitted: 1,200 of 1,200 (100%), 2s",
        ])

    def test_a_terminal_gets_one_line_redrawn(self):
        out = FakeTerminal()
        self.run_transfer(out, 3, 0.5)
        text = out.getvalue()
        self.assertEqual(text.count("\n"), 1)
        self.assertTrue(text.endswith("3.0 MiB of 3.0 MiB (100%), 2s\n"), text)
        self.assertEqual(text.split("\r\033[K")[1], "downloading the outputs of j: 2.0 MiB of 3.0 MiB (66%), 1s")

    def test_a_notebook_updates_one_display(self):
        display, shown = fake_notebook()
        with mock.patch("gpuq.progress._notebook_display", return_value=display):
            self.run_transfer(io.StringIO(), 3, 0.5)
        self.assertEqual([k for k, _ in shown], ["display", "update", "update"])
        self.assertIn("(100%)", shown[-1][1])

    def test_byte_counts(self):
        for n, want in ((0, "0 B"), (1023, "1023 B"), (1536, "1.5 KiB"), (12 << 20, "12 MiB"), (5 << 30, "5.0 GiB"), (1 << 62, "4.0 EiB")):
            self.assertEqual(byte_count(n), want)


class HandSweep(Sweep):
    TICK = 3600.0  # the clock is driven by hand


class SweepTest(unittest.TestCase):
    """wait_all's count of a list's jobs finished, by outcome."""

    def run_sweep(self, stream, outcomes, step, mode=None):
        now = [100.0]
        sweep = HandSweep(len(outcomes), stream=stream, mode=mode, clock=lambda: now[0])
        for state in outcomes:
            now[0] += step
            sweep.finished(state)
        sweep.close()

    def test_a_list_already_finished_shows_nothing(self):
        out = io.StringIO()
        self.run_sweep(out, ["succeeded"] * 50, 0.001)
        self.assertEqual(out.getvalue(), "")

    def test_plain_lines_every_few_seconds_and_the_end(self):
        out = io.StringIO()
        self.run_sweep(out, ["succeeded", "failed", "succeeded", "succeeded", "cancelled", "succeeded", "succeeded"], 2.0)
        self.assertEqual(out.getvalue().splitlines(), [
            "wait_all: 1 of 7 finished (1 succeeded), 2s",
            "wait_all: 4 of 7 finished (3 succeeded, 1 failed), 8s",
            "wait_all: 7 of 7 finished (5 succeeded, 1 failed, 1 cancelled), 14s",
        ])

    def test_a_terminal_gets_one_line_redrawn(self):
        out = FakeTerminal()
        self.run_sweep(out, ["succeeded", "dead"], 1.0)
        text = out.getvalue()
        self.assertEqual(text.count("\n"), 1)
        self.assertTrue(text.endswith("\r\033[Kwait_all: 2 of 2 finished (1 succeeded, 1 dead), 2s\n"), text)

    def test_a_notebook_updates_one_display(self):
        display, shown = fake_notebook()
        with mock.patch("gpuq.progress._notebook_display", return_value=display):
            self.run_sweep(io.StringIO(), ["succeeded", "failed"], 1.0)
        self.assertEqual([k for k, _ in shown], ["display", "update", "update"])
        self.assertIn("2 of 2 finished (1 succeeded, 1 failed)", shown[-1][1])


class ErrorTest(unittest.TestCase):
    def test_problem_details_name_each_field(self):
        doc = {"title": "Unprocessable Entity", "status": 422, "detail": "invalid job spec",
               "errors": [{"location": "spec.resources.gpu.count", "message": "must be 1–16, got 0"}]}
        err = api_error(422, doc)
        self.assertIsInstance(err, gpuq.InvalidRequest)
        self.assertEqual(err.fields, {"spec.resources.gpu.count": "must be 1–16, got 0"})
        self.assertEqual(str(err), "invalid job spec: spec.resources.gpu.count: must be 1–16, got 0 (HTTP 422)")
        self.assertIsInstance(api_error(404, {"detail": "job x not found"}), gpuq.NotFound)
        # A detail that already says what the field's message says.
        too_big = api_error(413, {"detail": "body: an archive may be at most 200000 bytes (storage.workdir_max_bytes)",
                                  "errors": [{"location": "body", "message": "at most 200000 bytes (storage.workdir_max_bytes)"}]})
        self.assertEqual(str(too_big), "body: an archive may be at most 200000 bytes (storage.workdir_max_bytes) (HTTP 413)")
        limited = api_error(429, "slow down", retry_after=3)
        self.assertIsInstance(limited, gpuq.RateLimited)
        self.assertEqual(limited.retry_after, 3)


class ConfigTest(unittest.TestCase):
    def test_from_env_reads_the_dev_config_then_the_environment(self):
        with tempfile.TemporaryDirectory() as d:
            os.makedirs(os.path.join(d, ".gpuq"))
            path = os.path.join(d, ".gpuq", "config.yaml")
            with open(path, "w") as f:
                f.write("# Written by gpuq dev\nnats-url: nats://x\nurl: http://127.0.0.1:9\ntoken: gpuq_abc\npools:\n  - {pool: a}\n")
            self.assertEqual(_read_config(path)["url"], "http://127.0.0.1:9")
            with mock.patch.dict(os.environ, {"GPUQ_CONFIG": path}, clear=False):
                os.environ.pop("GPUQ_URL", None)
                os.environ.pop("GPUQ_TOKEN", None)
                self.assertEqual(gpuq.Client.from_env().url, "http://127.0.0.1:9")
                with mock.patch.dict(os.environ, {"GPUQ_URL": "http://example.test:1", "GPUQ_TOKEN": "t"}):
                    self.assertEqual(gpuq.Client.from_env().url, "http://example.test:1")

    def test_a_bad_url_or_missing_token_is_refused(self):
        with self.assertRaisesRegex(gpuq.GpuqError, "url"):
            gpuq.Client("localhost:8080", "t")
        with self.assertRaisesRegex(gpuq.GpuqError, "token"):
            gpuq.Client("http://localhost:8080", "")

    def test_the_token_is_not_in_the_repr(self):
        self.assertNotIn("secret", repr(gpuq.Client("http://localhost:8080", "secret")))


class PathsAndTimesTest(unittest.TestCase):
    def test_an_output_path_outside_the_directory_is_refused(self):
        self.assertEqual(_inside("/r", "a/b.txt"), os.path.join("/r", "a", "b.txt"))
        for bad in ("../x", "/etc/passwd", "a/../../x", ".."):
            with self.assertRaises(gpuq.GpuqError):
                _inside("/r", bad)

    def test_times_with_nanoseconds_and_z_parse_on_python_3_9(self):
        t = parse_time("2026-12-01T06:44:06.085607123Z")
        self.assertEqual((t.microsecond, t.utcoffset().total_seconds()), (85607, 0))
        self.assertIsNone(parse_time(None))


class CheckpointTest(unittest.TestCase):
    def test_save_outside_a_job_says_so(self):
        with mock.patch.dict(os.environ, {}, clear=True):
            with self.assertRaisesRegex(gpuq.CheckpointError, "GPUQ_CONTROL_SOCKET is not set"):
                gpuq.checkpoint.save()


if __name__ == "__main__":
    unittest.main()


class MergedTest(unittest.TestCase):
    """logs_all(follow=True) reads several jobs' output at once."""

    def test_items_come_as_they_are_made_with_at_most_so_many_read_at_once(self):
        gates = [threading.Event() for _ in range(4)]
        reading = []
        lock = threading.Lock()

        def source(i):
            with lock:
                reading.append(i)
            yield (i, "first")
            gates[i].wait(10)
            yield (i, "last")

        merged = _merged([source(i) for i in range(4)], 2)
        firsts = {next(merged), next(merged)}
        # Two sources are read at once: the third starts only when one ends.
        self.assertEqual(firsts, {(0, "first"), (1, "first")})
        time.sleep(0.2)
        self.assertEqual(sorted(reading), [0, 1])
        gates[1].set()
        self.assertEqual(next(merged), (1, "last"))
        self.assertEqual(next(merged), (2, "first"))
        for g in gates:
            g.set()
        rest = list(merged)
        self.assertCountEqual(rest, [(0, "last"), (2, "last"), (3, "first"), (3, "last")])
        self.assertLess(rest.index((3, "first")), rest.index((3, "last")))

    def test_an_error_of_one_source_is_raised_after_what_it_yielded(self):
        def good():
            yield "a"
            time.sleep(0.3)
            yield "b"

        def bad():
            yield "x"
            raise gpuq.NotFound(404, "Not Found", "job gone")

        got = []
        with self.assertRaises(gpuq.NotFound):
            for item in _merged([good(), bad()], 2):
                got.append(item)
        self.assertIn("x", got)

    def test_closing_it_stops_the_readers(self):
        stopped = threading.Event()

        def endless():
            try:
                while True:
                    yield 1
            finally:
                stopped.set()

        merged = _merged([endless(), endless()], 2)
        self.assertEqual(next(merged), 1)
        merged.close()
        self.assertTrue(stopped.wait(5), "a reader went on after the iterator was closed")


class ResultDirsTest(unittest.TestCase):
    def test_each_job_gets_a_directory_of_its_own_named_as_gpuq_results_by_name_names_it(self):
        names = ["lr-0.1", "lr-0.01", "", "../etc", "sh lr=0.1/x", "dup", "dup", "Case", "case", "ünï", ".hidden", "x" * 150]
        jobs = [gpuq.Job.from_doc({"id": "01a25209-0000-7000-8000-%012d" % i, "name": n, "state": "succeeded"})
                for i, n in enumerate(names)]
        end = [j.id[24:] for j in jobs]
        dirs = _result_dirs(jobs, by_name=True)
        self.assertEqual([dirs[j.id] for j in jobs],
                         ["lr-0.1", "lr-0.01", end[2], "etc", "sh_lr=0.1_x", "dup-" + end[5], "dup-" + end[6],
                          "Case-" + end[7], "case-" + end[8], "n_", "hidden", "x" * 100])
        self.assertEqual(_result_dirs(jobs, by_name=False), {j.id: j.id for j in jobs})


class FakeAPI(http.server.BaseHTTPRequestHandler):
    """A request handler answering as the gpuq HTTP API does: documents,
    problems and streams of a job's state changes."""

    def log_message(self, *args):
        pass

    def answer(self, status, doc, content_type="application/json"):
        body = json.dumps(doc).encode()
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def unavailable(self):
        self.answer(503, {"title": "Service Unavailable", "status": 503}, "application/problem+json")

    def states(self, job, events):
        """A stream of the job's state changes, (id, state) each, that the
        server then ends."""
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Connection", "close")
        self.end_headers()
        for seq, state in events:
            doc = {"job_id": job, "state": state, "attempt": 1, "message": state, "at": "2026-12-05T23:21:27Z"}
            self.wfile.write(("id: %s\nevent: state\ndata: %s\n\n" % (seq, json.dumps(doc))).encode())
        self.close_connection = True


class ReconnectTest(unittest.TestCase):
    """A job's event stream through a server that ends it, then answers 503
    or drops connections while it restarts: the client resumes after the
    last event, warns once per outage, and a server never reached is an
    error at once."""

    JOB = "01a24883-315e-70c4-b75c-ec8c7f9bdf52"

    def serve(self, handler):
        srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
        threading.Thread(target=srv.serve_forever, daemon=True).start()
        self.addCleanup(srv.server_close)
        self.addCleanup(srv.shutdown)
        return gpuq.Client("http://127.0.0.1:%d" % srv.server_address[1], "t")

    def test_events_resume_after_the_last_event_and_warn_once(self):
        job = self.JOB
        asked = []

        class Handler(FakeAPI):
            def do_GET(self):
                if self.path != "/v1/jobs/%s/events" % job:
                    return self.unavailable()  # the job itself: the server is restarting
                last = self.headers.get("Last-Event-ID")
                asked.append(last)
                if last is None:
                    return self.states(job, [("1", "running")])
                if asked.count("1") < 3:
                    return self.unavailable()
                return self.states(job, [("2", "succeeded")])

        c = self.serve(Handler)
        with self.assertLogs("gpuq", level="WARNING") as logs:
            states = [e.state for e in c.events(job)]
        self.assertEqual(states, ["running", "succeeded"])
        self.assertEqual(asked, [None, "1", "1", "1"])
        self.assertEqual(len(logs.records), 1, logs.output)
        self.assertIn("503", logs.output[0])

    def test_wait_rides_through_connections_dropped_without_an_answer(self):
        # A server stopping closes connections it has read a request from
        # without answering: urllib raises that as a bare OSError, which the
        # client must take for the API out of reach, as a refused one.
        job = self.JOB
        seen = []

        class Handler(FakeAPI):
            def do_GET(self):
                seen.append(self.path)
                if len(seen) in (2, 3, 4):
                    self.close_connection = True
                    return  # no answer at all
                if self.path.endswith("/events"):
                    return self.states(job, [("1", "succeeded")])
                self.answer(200, {"id": job, "project": "p", "name": "n", "state": "running" if len(seen) == 1 else "succeeded",
                                  "attempt": 1, "errors": 0, "preemptions": 0, "placement_version": 1})

        c = self.serve(Handler)
        with self.assertLogs("gpuq", level="WARNING") as logs:
            job_now = c.wait(job, timeout=30, progress=False)
        self.assertEqual(job_now.state, "succeeded")
        self.assertEqual(seen[4:], ["/v1/jobs/%s/events" % job, "/v1/jobs/%s" % job])
        self.assertEqual(len(logs.records), 1, logs.output)
        with self.assertRaises(gpuq.Unreachable):
            seen.clear()
            seen.append("")  # the next request is the 2nd: dropped
            c.get(job)

    def test_a_rate_limited_request_is_sent_again_and_a_get_while_unavailable(self):
        # A 429 is sent again after its Retry-After, with its body, whatever
        # the method; a GET answered 503 is asked again with one warning; a
        # POST answered 503 is not, since the server may have acted on it.
        job = self.JOB
        seen = []

        class Handler(FakeAPI):
            def do_POST(self):
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0)).decode()
                seen.append((self.path, body))
                if self.path.endswith("/cancel"):
                    return self.unavailable()
                if len(seen) <= 2:
                    self.send_response(429)
                    self.send_header("Retry-After", "0")
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                self.answer(201, {"id": job, "project": "p", "name": "n", "state": "placed", "attempt": 0,
                                  "errors": 0, "preemptions": 0, "placement_version": 1})

            def do_GET(self):
                seen.append((self.path, ""))
                if len(seen) <= 2:
                    return self.unavailable()
                self.answer(200, {"id": job, "project": "p", "name": "n", "state": "running", "attempt": 1,
                                  "errors": 0, "preemptions": 0, "placement_version": 1})

        c = self.serve(Handler)
        self.assertEqual(c.submit(command=["true"]).id, job)
        self.assertEqual(len(seen), 3)
        self.assertEqual(len({body for _, body in seen}), 1, seen)
        self.assertIn('"command": ["true"]', seen[0][1])
        seen.clear()
        with self.assertLogs("gpuq", level="WARNING") as logs:
            self.assertEqual(c.get(job).state, "running")
        self.assertEqual(len(seen), 3)
        self.assertEqual(len(logs.records), 1, logs.output)
        seen.clear()
        with self.assertRaises(gpuq.APIError) as caught:
            c.cancel(job)
        self.assertEqual((caught.exception.status, len(seen)), (503, 1))

    def test_a_submission_with_an_idempotency_key_is_sent_again_while_unavailable(self):
        # The same key names the same job however often it arrives; a
        # submission without one may have been acted on, and is not resent.
        job = self.JOB
        seen = []

        class Handler(FakeAPI):
            def do_POST(self):
                seen.append(self.rfile.read(int(self.headers.get("Content-Length") or 0)).decode())
                if len(seen) <= 2:
                    return self.unavailable()
                self.answer(201, {"id": job, "project": "p", "name": "n", "state": "placed", "attempt": 0,
                                  "errors": 0, "preemptions": 0, "placement_version": 1})

        c = self.serve(Handler)
        with self.assertRaises(gpuq.APIError) as caught:
            c.submit(command=["true"])
        self.assertEqual((caught.exception.status, len(seen)), (503, 1))
        with self.assertLogs("gpuq", level="WARNING"):
            self.assertEqual(c.submit(command=["true"], idempotency_key="run-7").id, job)
        self.assertEqual(len(seen), 3)
        self.assertIn('"idempotency_key": "run-7"', seen[2])

    def test_a_server_never_reached_is_an_error_at_once(self):
        srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), http.server.BaseHTTPRequestHandler)
        port = srv.server_address[1]
        srv.server_close()
        c = gpuq.Client("http://127.0.0.1:%d" % port, "t")
        for follow in (lambda: list(c.events("j")), lambda: list(c.logs("j", follow=True))):
            with self.assertRaises(gpuq.Unreachable):
                follow()


class WorkdirPackTest(unittest.TestCase):
    """A job's working directory packed as the contract says: relative
    names in order, left-out names, symlinks kept only inside, and the
    same digest for the same files."""

    def setUp(self):
        tmp = tempfile.TemporaryDirectory()
        self.addCleanup(tmp.cleanup)
        self.dir = os.path.join(tmp.name, "proj")
        os.makedirs(self.dir)

    def write(self, rel, data=b"x"):
        path = os.path.join(self.dir, *rel.split("/"))
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "wb") as f:
            f.write(data)
        return path

    def pack(self):
        """The digest, the members and the raw bytes of the directory's archive."""
        with gpuq.workdir.packed(self.dir) as p:
            with open(p.path, "rb") as f:
                raw = f.read()
            with tarfile.open(p.path) as tar:
                members = tar.getmembers()
        self.assertEqual(p.bytes, len(raw))
        self.assertEqual(p.digest, "sha256:" + hashlib.sha256(raw).hexdigest())
        self.assertEqual(p.hex, p.digest[len("sha256:"):])
        return p.digest, members, raw

    def names(self):
        return [m.name for m in self.pack()[1]]

    def test_unchanged_files_pack_to_the_same_digest(self):
        train = self.write("train.py", b"print('hi')\n")
        self.write("data/input.txt", b"1 2 3\n")
        first = self.pack()[0]
        self.assertEqual(self.pack()[0], first)
        os.utime(train, (1, 1))  # touched: only its mtime changes
        os.utime(os.path.join(self.dir, "data"), (2, 2))
        self.assertEqual(self.pack()[0], first)
        self.write("train.py", b"print('hi!')\n")
        self.assertNotEqual(self.pack()[0], first)

    def test_entries_are_relative_in_order_without_owners_or_times(self):
        self.write("train.py")
        self.write("data/b.csv")
        self.write("data/a.csv")
        self.write("data-2/c.csv")
        os.makedirs(os.path.join(self.dir, "empty"))
        os.chmod(self.write("run.sh"), 0o750)
        _, members, raw = self.pack()
        self.assertEqual([m.name for m in members],
                         ["data", "data/a.csv", "data/b.csv", "data-2", "data-2/c.csv", "empty", "run.sh", "train.py"])
        self.assertEqual([m.name for m in members if m.isdir()], ["data", "data-2", "empty"])
        for m in members:
            self.assertFalse(m.name.startswith(("./", "/")), m.name)
            self.assertEqual((m.mtime, m.uid, m.gid, m.uname, m.gname), (0, 0, 0, "", ""), m.name)
        self.assertEqual({m.name: m.mode for m in members if m.isfile()}["run.sh"], 0o750)
        tar = gzip.decompress(raw)
        self.assertEqual(tar[:len("data/")], b"data/")  # a directory's name ends in /
        # The gzip header: no flags (no file name), mtime 0.
        self.assertEqual(raw[:8], b"\x1f\x8b\x08\x00\x00\x00\x00\x00")

    def test_version_control_settings_caches_and_virtualenvs_are_left_out_at_any_depth(self):
        self.write("train.py")
        for rel in (".git/config", ".gpuq/config.yaml", ".gpuq/token", "__pycache__/train.cpython-39.pyc",
                    ".ipynb_checkpoints/nb-checkpoint.ipynb", ".venv/bin/python", "src/__pycache__/m.pyc",
                    "src/a/.git/HEAD", "src/a/.venv/x", "src/a/.ipynb_checkpoints/y", "src/.gpuq/token",
                    "src/model.py"):
            self.write(rel)
        self.write("src/a/.gpuq")  # a file of that name too
        with self.assertNoLogs("gpuq") if hasattr(self, "assertNoLogs") else contextlib.nullcontext():
            names = self.names()
        self.assertEqual(names, ["src", "src/a", "src/model.py", "train.py"])

    def test_symlinks_inside_are_kept_and_others_left_out_with_a_warning(self):
        self.write("data/input.txt")
        self.write("src/model.py")
        outside = self.write("../secret.txt")
        os.symlink("data/input.txt", os.path.join(self.dir, "input.txt"))
        os.symlink("../data", os.path.join(self.dir, "src", "data"))
        os.symlink("../secret.txt", os.path.join(self.dir, "secret.txt"))
        os.symlink("../../secret.txt", os.path.join(self.dir, "src", "up"))
        os.symlink(outside, os.path.join(self.dir, "abs-outside"))
        os.symlink(os.path.join(self.dir, "data"), os.path.join(self.dir, "abs-inside"))
        with self.assertLogs("gpuq", level="WARNING") as logs:
            _, members, _ = self.pack()
        self.assertEqual([(m.name, m.linkname) for m in members if m.issym()],
                         [("input.txt", "data/input.txt"), ("src/data", "../data")])
        self.assertNotIn("secret.txt", [m.name for m in members])
        self.assertEqual([r.getMessage() for r in logs.records], [
            "workdir: left out abs-inside: a symlink to %s, an absolute path (a link inside the directory is "
            "kept only when relative)" % os.path.join(self.dir, "data"),
            "workdir: left out abs-outside: a symlink to %s, outside the directory" % outside,
            "workdir: left out secret.txt: a symlink to ../secret.txt, outside the directory",
            "workdir: left out src/up: a symlink to ../../secret.txt, outside the directory",
        ])

    @unittest.skipUnless(hasattr(os, "mkfifo"), "no fifos here")
    def test_a_fifo_is_left_out_with_a_warning(self):
        self.write("train.py")
        os.mkfifo(os.path.join(self.dir, "pipe"))
        with self.assertLogs("gpuq", level="WARNING") as logs:
            self.assertEqual(self.names(), ["train.py"])
        self.assertEqual(logs.output, ["WARNING:gpuq:workdir: left out pipe: a fifo (named pipe)"])

    def test_a_directory_over_the_limit_is_refused_naming_its_largest_entries(self):
        self.write("train.py", b"print(1)\n")
        self.write("data/a.bin", os.urandom(6000))
        self.write("data/b.bin", os.urandom(3000))
        self.write("model.pt", os.urandom(2048))
        with tempfile.TemporaryDirectory() as tmp, mock.patch.object(tempfile, "tempdir", tmp), \
                mock.patch.object(gpuq.workdir, "MAX_BYTES", 4096):
            with self.assertRaises(gpuq.GpuqError) as caught:
                with gpuq.workdir.packed(self.dir):
                    self.fail("packed over the limit")
            self.assertEqual(os.listdir(tmp), [])  # the partial archive is removed
            with mock.patch.object(gpuq.workdir, "MAX_BYTES", 1 << 20), gpuq.workdir.packed(self.dir) as p:
                self.assertTrue(os.path.exists(p.path))
            self.assertEqual(os.listdir(tmp), [])
        msg = str(caught.exception)
        self.assertEqual(msg, "workdir %s packs to over 4.0 KiB (its files hold 11 KiB), more than an upload may be "
                              "(storage.workdir_max_bytes); largest: data/ 8.8 KiB, model.pt 2.0 KiB, train.py 9 B"
                         % self.dir)

    def test_a_path_that_is_not_a_directory_is_named(self):
        train = self.write("train.py")
        for path, why in ((train, "is not a directory"), (os.path.join(self.dir, "nope"), "does not exist")):
            with self.assertRaisesRegex(gpuq.GpuqError, "^workdir: %s %s" % (re.escape(path), why)):
                with gpuq.workdir.packed(path):
                    pass

    def test_gpuqignore_leaves_out_what_its_patterns_match(self):
        self.write(".gpuqignore", b"# not shipped\ndata/\n\n  /notes.md  \n*.ckpt\noutputs/*.pt\nwandb\n")
        for rel in ("train.py", "notes.md", "src/notes.md", "data/x.csv", "src/lib/data/y.csv", "src/lib/m.py",
                    "a.ckpt", "src/b.ckpt", "A.CKPT", "outputs/x.pt", "outputs/x.txt", "outputs/deep/y.pt",
                    "wandb/run-1/log", "src/wandb"):
            self.write(rel)
        self.write("src/data")  # a file: data/ matches directories only
        self.write("src/.gpuqignore", b"*\n")  # only the root's is read
        self.write("../outside.ckpt")
        os.symlink("../../outside.ckpt", os.path.join(self.dir, "src", "link.ckpt"))  # matched: no warning
        with mock.patch.object(gpuq.workdir._log, "warning") as warning:
            digest, members, _ = self.pack()
        warning.assert_not_called()
        self.assertEqual([m.name for m in members], [
            ".gpuqignore", "A.CKPT", "outputs", "outputs/deep", "outputs/deep/y.pt", "outputs/x.txt",
            "src", "src/.gpuqignore", "src/data", "src/lib", "src/lib/m.py", "src/notes.md", "train.py"])
        self.assertTrue({m.name: m for m in members}["src/data"].isfile())
        self.assertEqual(self.pack()[0], digest)
        self.write("a.ckpt", b"changed")  # a file left out does not change the digest
        self.write("data/new.csv")
        self.assertEqual(self.pack()[0], digest)

    def test_gpuqignore_anchors_paths_and_matches_classes_segment_by_segment(self):
        self.write(".gpuqignore", b"/build/\nlogs/run-?\nckpt-[0-9].pt\n")
        for rel in ("build/out.o", "src/build/keep.o", "logs/run-1", "logs/run-12", "logs/a/run-2",
                    "ckpt-3.pt", "src/ckpt-7.pt", "ckpt-x.pt"):
            self.write(rel)
        self.assertEqual(self.names(), [".gpuqignore", "ckpt-x.pt", "logs", "logs/a", "logs/a/run-2",
                                        "logs/run-12", "src", "src/build", "src/build/keep.o"])

    def test_gpuqignore_refuses_what_it_does_not_support_naming_the_line(self):
        self.write("train.py")
        for line, quoted, why in (
                ("!x", "!x", "negation (!) is not supported"),
                ("  !keep.txt ", "!keep.txt", "negation (!) is not supported"),
                ("[!a]*", "[!a]*", "negated classes ([! or [^) are not supported"),
                ("src/[^a]*", "src/[^a]*", "negated classes ([! or [^) are not supported"),
                ("**/x", "**/x", "** is not supported; a pattern without / matches at any depth"),
                ("[ab", "[ab", "malformed pattern"),
                ("x[a-z]/[]y", "x[a-z]/[]y", "malformed pattern"),
                ("/", "/", "malformed pattern"),
                ("a//b", "a//b", "malformed pattern"),
                ("\\*.txt", "\\*.txt", "backslash escapes are not supported")):
            self.write(".gpuqignore", ("# comment\n\n*.ckpt\n%s\nwandb\n" % line).encode())
            with tempfile.TemporaryDirectory() as tmp, mock.patch.object(tempfile, "tempdir", tmp):
                with self.assertRaises(gpuq.GpuqError) as caught:
                    with gpuq.workdir.packed(self.dir):
                        self.fail("packed with %r" % line)
                self.assertEqual(os.listdir(tmp), [])  # refused before anything is written
            self.assertEqual(str(caught.exception),
                             'workdir %s: .gpuqignore line 4: "%s": %s' % (self.dir, quoted, why))


class WorkdirUploadTest(unittest.TestCase):
    """submit, submit_many and plan with a local workdir, against a fake
    API: the directory is uploaded once to /v1/workdirs/<hex> and the spec
    names it by its digest."""

    JOB = ReconnectTest.JOB
    serve = ReconnectTest.serve

    def setUp(self):
        tmp = tempfile.TemporaryDirectory()
        self.addCleanup(tmp.cleanup)
        self.dir = os.path.join(tmp.name, "proj")
        os.makedirs(os.path.join(self.dir, ".gpuq"))
        for rel, data in (("train.py", "print('hi')\n"), (".gpuq/token", "secret")):
            with open(os.path.join(self.dir, rel), "w") as f:
                f.write(data)
        with gpuq.workdir.packed(self.dir) as p:
            self.digest = p.digest
        self.seen = []
        self.refuse = []  # statuses to answer the next uploads with
        self.client = self.serve(self.handler())

    def handler(self):
        test = self

        class Handler(FakeAPI):
            def body(self):
                return self.rfile.read(int(self.headers.get("Content-Length") or 0))

            def do_PUT(self):
                body = self.body()
                hex_ = hashlib.sha256(body).hexdigest()
                test.seen.append(("PUT", self.path, self.headers.get("Content-Type"), hex_))
                if test.refuse:
                    status = test.refuse.pop(0)
                    self.send_response(status)
                    self.send_header("Retry-After", "0")
                    self.send_header("Content-Type", "application/problem+json")
                    doc = json.dumps({"title": "no", "status": status, "detail": "refused %d" % status}).encode()
                    self.send_header("Content-Length", str(len(doc)))
                    self.end_headers()
                    self.wfile.write(doc)
                    return
                self.answer(200, {"workdir": "sha256:" + hex_, "project": "p", "bytes": len(body)})

            def do_POST(self):
                doc = json.loads(self.body())
                test.seen.append(("POST", self.path, doc))
                job = {"id": test.JOB, "project": "p", "name": "n", "state": "placed", "attempt": 0}
                if self.path == "/v1/jobs/batch":
                    return self.answer(201, {"jobs": [{"job": job} for _ in doc["jobs"]]})
                if self.path == "/v1/plan":
                    return self.answer(200, {"feasible": True, "reason": ""})
                self.answer(201, job)

        return Handler

    def test_submit_uploads_the_directory_then_names_its_digest(self):
        hex_ = self.digest[len("sha256:"):]
        self.client.submit(command=["python3", "train.py"], workdir=self.dir, project="vision")
        self.assertEqual(self.seen[0], ("PUT", "/v1/workdirs/%s?project=vision" % hex_, "application/gzip", hex_))
        self.assertEqual(self.seen[1][:2], ("POST", "/v1/jobs"))
        self.assertEqual(self.seen[1][2], {"command": ["python3", "train.py"], "workdir": self.digest,
                                           "project": "vision"})
        self.assertEqual(len(self.seen), 2)
        # A spec dict's workdir, a pathlib path, no project: the same upload.
        self.seen.clear()
        self.client.submit({"command": ["true"], "workdir": pathlib.Path(self.dir)}, idempotency_key="k")
        self.assertEqual([s[:2] for s in self.seen], [("PUT", "/v1/workdirs/" + hex_), ("POST", "/v1/jobs")])
        self.assertEqual(self.seen[1][2]["workdir"], self.digest)
        # A digest is sent as it is.
        self.seen.clear()
        self.client.submit(command=["true"], workdir="sha256:" + "a" * 64)
        self.assertEqual([s[:2] for s in self.seen], [("POST", "/v1/jobs")])
        self.assertEqual(self.seen[0][2]["workdir"], "sha256:" + "a" * 64)

    def test_submit_many_uploads_each_directory_once_per_project(self):
        other = os.path.join(os.path.dirname(self.dir), "other")
        os.makedirs(other)
        specs = [{"command": ["true"], "workdir": self.dir}, {"command": ["true"], "workdir": self.dir},
                 {"command": ["true"], "workdir": self.dir, "project": "vision"},
                 {"command": ["true"], "workdir": other}, {"command": ["true"]}]
        self.client.submit_many(specs, progress=False)
        puts = [s[1] for s in self.seen if s[0] == "PUT"]
        hex_ = self.digest[len("sha256:"):]
        self.assertEqual(puts[:2], ["/v1/workdirs/" + hex_, "/v1/workdirs/%s?project=vision" % hex_])
        self.assertEqual(len(puts), 3)
        batch = [s[2] for s in self.seen if s[0] == "POST"]
        self.assertEqual(len(batch), 1)
        workdirs = [j.get("workdir") for j in batch[0]["jobs"]]
        self.assertEqual(workdirs[:3], [self.digest] * 3)
        self.assertTrue(workdirs[3].startswith("sha256:") and workdirs[3] != self.digest, workdirs)
        self.assertIsNone(workdirs[4])
        self.assertEqual(specs[0]["workdir"], self.dir)  # the caller's specs are left as they were

    def test_plan_packs_without_uploading(self):
        self.assertTrue(self.client.plan(command=["true"], workdir=self.dir).feasible)
        self.assertEqual([s[:2] for s in self.seen], [("POST", "/v1/plan")])
        self.assertEqual(self.seen[0][2]["workdir"], self.digest)

    def test_upload_workdir_returns_the_digest_and_sends_it_all_again_after_a_429(self):
        self.refuse.append(429)
        self.assertEqual(self.client.upload_workdir(self.dir, progress=False), self.digest)
        hex_ = self.digest[len("sha256:"):]
        self.assertEqual([s[3] for s in self.seen], [hex_, hex_])
        self.refuse.append(413)
        with self.assertRaises(gpuq.APIError) as caught:
            self.client.upload_workdir(self.dir)
        self.assertEqual((caught.exception.status, caught.exception.detail), (413, "refused 413"))
        with self.assertRaisesRegex(gpuq.GpuqError, "is not a directory"):
            self.client.submit(command=["true"], workdir=os.path.join(self.dir, "train.py"))
        self.assertEqual(len(self.seen), 3)  # nothing sent for a file

    def test_a_long_upload_shows_its_progress(self):
        out = io.StringIO()
        with mock.patch.object(Transfer, "QUIET", 0.0), contextlib.redirect_stderr(out):
            self.client.upload_workdir(self.dir)
        with gpuq.workdir.packed(self.dir) as p:
            size = byte_count(p.bytes)
        self.assertEqual(out.getvalue().splitlines()[-1][:-len(", 0s")],
                         "uploading workdir %s: %s of %s (100%%)" % (self.dir, size, size))


class SecretTest(unittest.TestCase):
    """set_secret, secrets and delete_secret against a fake API: the
    requests they send, the documents they read, the errors they raise, and
    a value that reaches no exception, log line or repr."""

    VALUE = "hf_5e3c0a9d41b7f28e"
    SET_AT = "2026-12-07T01:02:03.123456Z"
    serve = ReconnectTest.serve

    def setUp(self):
        self.seen = []  # (method, path, Authorization, Content-Type, JSON body or None)
        self.answers = []  # (status, document) for each next request; 204 has no body
        self.client = self.serve(self.handler())

    def handler(self):
        test = self

        class Handler(FakeAPI):
            def reply(self):
                raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                test.seen.append((self.command, self.path, self.headers.get("Authorization"),
                                  self.headers.get("Content-Type"), json.loads(raw) if raw else None))
                status, doc = test.answers.pop(0)
                if status == 204:
                    self.send_response(204)
                    self.end_headers()
                    return
                self.answer(status, doc, "application/json" if status < 400 else "application/problem+json")

            do_GET = do_PUT = do_POST = do_DELETE = reply

        return Handler

    def secret_doc(self, name, project="default"):
        return {"project": project, "name": name, "set_at": self.SET_AT, "set_by": "tok_01"}

    def problem(self, status, detail, errors=()):
        return status, {"title": "refused", "status": status, "detail": detail, "errors": list(errors)}

    def test_set_secret_puts_the_value_and_returns_the_secret_without_it(self):
        self.answers.append((200, self.secret_doc("WANDB_API_KEY", "vision")))
        s = self.client.set_secret("WANDB_API_KEY", self.VALUE, project="vision")
        self.assertEqual(self.seen, [("PUT", "/v1/projects/vision/secrets/WANDB_API_KEY", "Bearer t",
                                      "application/json", {"value": self.VALUE})])
        self.assertIsInstance(s, gpuq.Secret)
        self.assertEqual((s.project, s.name, s.set_by), ("vision", "WANDB_API_KEY", "tok_01"))
        self.assertEqual(s.set_at, parse_time(self.SET_AT))
        self.assertEqual(s.set_at.microsecond, 123456)
        self.assertNotIn(self.VALUE, repr(s))
        # The project defaults to default; each path segment is quoted.
        self.seen.clear()
        self.answers += [(200, self.secret_doc("HF_TOKEN")), (200, self.secret_doc("A/B C", "team a/b"))]
        self.client.set_secret("HF_TOKEN", "v")
        self.client.set_secret("A/B C", "v", project="team a/b")
        self.assertEqual([s[1] for s in self.seen], ["/v1/projects/default/secrets/HF_TOKEN",
                                                     "/v1/projects/team%20a%2Fb/secrets/A%2FB%20C"])

    def test_secrets_lists_names_in_the_servers_order_without_values(self):
        self.answers.append((200, {"project": "default", "secrets": [self.secret_doc("HF_TOKEN"),
                                                                     self.secret_doc("WANDB_API_KEY")]}))
        listed = self.client.secrets()
        self.assertEqual([(s.project, s.name, s.set_at, s.set_by) for s in listed],
                         [("default", "HF_TOKEN", parse_time(self.SET_AT), "tok_01"),
                          ("default", "WANDB_API_KEY", parse_time(self.SET_AT), "tok_01")])
        self.assertEqual(self.seen, [("GET", "/v1/projects/default/secrets", "Bearer t", None, None)])
        self.answers.append((200, {"project": "vision", "secrets": []}))
        self.assertEqual(self.client.secrets("vision"), [])
        self.assertEqual(self.seen[-1][1], "/v1/projects/vision/secrets")

    def test_delete_secret_sends_a_delete_and_one_not_set_is_not_found(self):
        self.answers += [(204, None), self.problem(404, "secret HF_TOKEN is not set for project vision")]
        self.assertIsNone(self.client.delete_secret("HF_TOKEN", project="vision"))
        with self.assertRaises(gpuq.NotFound):
            self.client.delete_secret("HF_TOKEN", project="vision")
        self.assertEqual(self.seen, [("DELETE", "/v1/projects/vision/secrets/HF_TOKEN", "Bearer t", None, None)] * 2)
        # A delete answered 503 is not sent again: a delete the server did
        # would answer 404.
        self.seen.clear()
        self.answers.append(self.problem(503, "restarting"))
        with self.assertRaises(gpuq.APIError) as caught:
            self.client.delete_secret("HF_TOKEN")
        self.assertEqual((caught.exception.status, len(self.seen)), (503, 1))

    def test_refusals_raise_their_errors(self):
        for status, kind in ((403, gpuq.Forbidden), (404, gpuq.NotFound), (409, gpuq.Conflict)):
            self.answers.append(self.problem(status, "no"))
            with self.assertRaises(kind):
                self.client.set_secret("HF_TOKEN", self.VALUE)
        self.answers.append(self.problem(404, "project vision not found"))
        with self.assertRaises(gpuq.NotFound):
            self.client.secrets("vision")
        self.assertEqual(len(self.seen), 4)

    def test_a_refused_value_is_named_by_its_field_and_never_echoed(self):
        # The API's validation may quote the input it refused; the client
        # masks it wherever the answer holds it, as the worker does in logs.
        self.answers.append(self.problem(422, "validation failed for " + self.VALUE, [
            {"location": "body.value", "message": "expected length <= 32768, got %s" % self.VALUE, "value": self.VALUE},
            {"location": "body", "message": "invalid", "value": {"value": [self.VALUE], "n": 1}},
            {"location": "path.name", "message": "must not start with GPUQ_", "value": "GPUQ_X"}]))
        with self.assertRaises(gpuq.InvalidRequest) as caught:
            self.client.set_secret("GPUQ_X", self.VALUE)
        err = caught.exception
        self.assertEqual(sorted(err.fields), ["body", "body.value", "path.name"])
        self.assertEqual(err.fields["body.value"], "expected length <= 32768, got ***")
        self.assertEqual([e.value for e in err.errors], ["***", {"value": ["***"], "n": 1}, "GPUQ_X"])
        self.assertIn("***", str(err))
        shown = "".join(traceback.format_exception(type(err), err, err.__traceback__))
        for text in (str(err), repr(err), repr(err.args), repr(err.errors), repr(err.fields), err.detail, shown):
            self.assertNotIn(self.VALUE, text)

    def test_a_value_not_a_str_or_a_bad_name_is_refused_before_any_request(self):
        for value in (b"hf_bytes_value", None, 918273645, ["hf_list_value"]):
            with self.assertRaises(TypeError) as caught:
                self.client.set_secret("HF_TOKEN", value)
            msg = str(caught.exception)
            self.assertTrue(msg.startswith("value: want a str"), msg)
            for shown in ("hf_bytes_value", "918273645", "hf_list_value"):
                self.assertNotIn(shown, msg)
        with self.assertRaisesRegex(TypeError, "^name: "):
            self.client.set_secret(None, "v")
        with self.assertRaisesRegex(ValueError, "^name: "):
            self.client.set_secret("", "v")
        with self.assertRaisesRegex(ValueError, "^name: "):
            self.client.delete_secret("")
        self.assertEqual(self.seen, [])

    def test_setting_a_secret_is_sent_again_while_unavailable_and_logged_masked(self):
        # The same value gives the same secret however often it arrives.
        down = self.problem(503, "backend gone while setting " + self.VALUE)
        self.answers += [down, down, (200, self.secret_doc("HF_TOKEN"))]
        with self.assertLogs("gpuq", level="WARNING") as logs:
            self.assertEqual(self.client.set_secret("HF_TOKEN", self.VALUE).name, "HF_TOKEN")
        self.assertEqual([s[4] for s in self.seen], [{"value": self.VALUE}] * 3)
        self.assertEqual(len(logs.records), 1, logs.output)
        self.assertIn("***", logs.output[0])
        self.assertNotIn(self.VALUE, logs.output[0])
        # Any other failure is raised at once, masked too.
        self.seen.clear()
        self.answers.append(self.problem(500, "boom: " + self.VALUE))
        with self.assertRaises(gpuq.APIError) as caught:
            self.client.set_secret("HF_TOKEN", self.VALUE)
        self.assertEqual((caught.exception.status, len(self.seen)), (500, 1))
        self.assertEqual(str(caught.exception), "boom: *** (HTTP 500)")

    def test_submit_submit_many_and_plan_send_the_secrets_names(self):
        job = {"id": ReconnectTest.JOB, "project": "default", "name": "n", "state": "placed", "attempt": 0,
               "spec": {"command": ["true"], "secrets": ["WANDB_API_KEY"]}}
        self.answers += [(201, job), (201, {"jobs": [{"job": job}]}), (200, {"feasible": True, "reason": ""})]
        self.assertEqual(self.client.submit(command=["true"], secrets=["WANDB_API_KEY"]).spec["secrets"],
                         ["WANDB_API_KEY"])
        self.client.submit_many([{"command": ["true"], "secrets": ["WANDB_API_KEY"]}], progress=False)
        self.client.plan({"command": ["true"], "secrets": ["WANDB_API_KEY"]})
        self.assertEqual([(s[0], s[1]) for s in self.seen],
                         [("POST", "/v1/jobs"), ("POST", "/v1/jobs/batch"), ("POST", "/v1/plan")])
        self.assertEqual([s[4]["secrets"] for s in (self.seen[0], self.seen[2])], [["WANDB_API_KEY"]] * 2)
        self.assertEqual(self.seen[1][4]["jobs"][0]["secrets"], ["WANDB_API_KEY"])

    def test_an_env_entry_named_like_a_credential_is_sent_with_a_warning(self):
        # As gpuq submit warns: once per name, however many specs carry
        # it; other names pass silently; the spec goes as given.
        job = {"id": ReconnectTest.JOB, "project": "default", "name": "n", "state": "placed", "attempt": 0,
               "spec": {"command": ["true"]}}
        self.answers += [(201, job), (201, {"jobs": [{"job": job}, {"job": job}]}), (201, job)]
        with self.assertLogs("gpuq", "WARNING") as logs:
            self.client.submit(command=["true"], env={"HF_TOKEN": "hf_x", "WANDB_MODE": "offline"})
            self.client.submit_many([{"command": ["true"], "env": {"DB_PASSWORD": "p", "TOKENIZERS_PARALLELISM": "false"}},
                                     {"command": ["true"], "env": {"DB_PASSWORD": "p"}}], progress=False)
        self.assertEqual(len(logs.output), 2, logs.output)
        self.assertIn("env HF_TOKEN looks like a credential", logs.output[0])
        self.assertIn("c.set_secret('HF_TOKEN', value), then secrets=['HF_TOKEN']", logs.output[0])
        self.assertIn("env DB_PASSWORD looks like a credential", logs.output[1])
        self.assertNotIn("hf_x", "".join(logs.output))
        self.assertEqual(self.seen[0][4]["env"], {"HF_TOKEN": "hf_x", "WANDB_MODE": "offline"})
        with self.assertNoLogs("gpuq", "WARNING"):
            self.client.submit(command=["true"], env={"WANDB_MODE": "offline", "MONKEY": "1"})


class NotificationTest(unittest.TestCase):
    """The status document's ``notification``: how the job's latest end
    was posted to the webhook its spec's ``notify`` names."""

    JOB = {"id": "01a24883-315e-70c4-b75c-ec8c7f9bdf52", "project": "default", "name": "train", "state": "failed",
           "attempt": 1, "exit_code": 3,
           "spec": {"command": ["true"], "notify": {"webhook": "SLACK_HOOK", "when": ["failed", "dead"]}}}

    def test_status_reads_the_notification_and_none_when_absent(self):
        doc = {"job": self.JOB, "attempts": [], "history": [],
               "notification": {"state": "failed", "ended_at": "2026-12-07T01:02:03.123456789Z",
                                "outcome": "pending", "tries": 2, "last_at": "2026-12-07T01:02:08Z",
                                "next_at": "2026-12-07T01:02:18.5Z", "http_status": 503,
                                "error": "the webhook answered 503 Service Unavailable"}}
        st = gpuq.JobStatus.from_doc(doc)
        note = st.notification
        self.assertIsInstance(note, gpuq.Notification)
        self.assertEqual((note.state, note.outcome, note.tries, note.http_status, note.error),
                         ("failed", "pending", 2, 503, "the webhook answered 503 Service Unavailable"))
        self.assertEqual((note.ended_at, note.last_at, note.next_at),
                         (parse_time("2026-12-07T01:02:03.123456Z"), parse_time("2026-12-07T01:02:08Z"),
                          parse_time("2026-12-07T01:02:18.5Z")))
        self.assertEqual(note.ended_at.microsecond, 123456)
        self.assertEqual(note.raw, doc["notification"])
        self.assertEqual(st.job.spec["notify"], {"webhook": "SLACK_HOOK", "when": ["failed", "dead"]})
        # Delivered: the optional fields left out read as their defaults.
        st = gpuq.JobStatus.from_doc({"job": self.JOB, "notification": {
            "state": "failed", "ended_at": "2026-12-07T01:02:03Z", "outcome": "delivered", "tries": 1,
            "last_at": "2026-12-07T01:02:04Z", "http_status": 200}})
        self.assertEqual((st.notification.outcome, st.notification.tries, st.notification.http_status,
                          st.notification.next_at, st.notification.error), ("delivered", 1, 200, None, ""))
        for absent in ({"job": self.JOB}, {"job": self.JOB, "notification": None}):
            self.assertIsNone(gpuq.JobStatus.from_doc(absent).notification)
            self.assertEqual(gpuq.JobStatus.from_doc(absent).spent, [])

    def test_a_failed_test_post_is_an_answer_saying_why(self):
        failed = gpuq.WebhookTest.from_doc({"project": "ml", "secret": "SLACK_HOOK", "host": "hooks.slack.com",
                                            "delivered": False, "http_status": 404,
                                            "error": "posting to hooks.slack.com: HTTP 404: no_service"})
        self.assertEqual((failed.delivered, failed.http_status, failed.host, failed.error),
                         (False, 404, "hooks.slack.com", "posting to hooks.slack.com: HTTP 404: no_service"))
        # No answer from the webhook: no status; no URL in the secret: no host.
        refused = gpuq.WebhookTest.from_doc({"project": "ml", "secret": "HOOK", "delivered": False,
                                             "error": "secret HOOK of project ml does not hold an http:// or https:// URL"})
        self.assertEqual((refused.delivered, refused.http_status, refused.host), (False, 0, ""))

    def test_status_reads_what_the_job_cost(self):
        st = gpuq.JobStatus.from_doc({"job": self.JOB, "spent": ["4.12 EUR", "0.50 USD"]})
        self.assertEqual(st.spent, ["4.12 EUR", "0.50 USD"])


class AfterTest(unittest.TestCase):
    """Jobs that run after others, against a fake API: ``after`` and
    ``after_ended`` take Job objects as well as ids and send ids, refuse
    anything else before any request, the status document's ``after`` and
    ``after_ended`` are read, cancel_label cancels waiting jobs too, list
    sends ``runs_after`` as an id, retry_downstream retries the jobs
    after a job in the order they were submitted, and the ``job`` of an
    entry of ``inputs`` takes a Job, an id or (submit_many) the name of
    earlier specs."""

    PREP = "01a24883-315e-70c4-b75c-ec8c7f9bdf52"
    EVAL = "01a24883-315e-70c4-b75c-ec8c7f9bdf53"
    TRAIN = "01a24883-315e-70c4-b75c-ec8c7f9bdf54"
    serve = ReconnectTest.serve

    def setUp(self):
        self.seen = []  # (method, path, JSON body or None)
        self.answers = []  # (status, document) for each next request
        self.client = self.serve(self.handler())

    def handler(self):
        test = self

        class Handler(FakeAPI):
            def reply(self):
                raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                test.seen.append((self.command, self.path, json.loads(raw) if raw else None))
                self.answer(*test.answers.pop(0))

            do_GET = do_POST = reply

        return Handler

    def job_doc(self, job_id, state="placed", name="n", **spec):
        return {"id": job_id, "project": "default", "name": name, "state": state, "attempt": 0,
                "spec": dict(command=["true"], **spec)}

    def test_submit_and_submit_many_send_jobs_as_their_ids(self):
        prep = gpuq.Job.from_doc(self.job_doc(self.PREP, name="prep"))
        waiting = self.job_doc(self.TRAIN, "waiting", "train", after=[self.PREP, self.EVAL])
        self.answers += [(201, waiting), (201, waiting), (201, {"jobs": [{"job": waiting}, {"job": waiting}]}),
                         (200, {"feasible": True, "reason": ""})]
        train = self.client.submit(name="train", command=["true"], after=[prep, self.EVAL])
        self.assertEqual(train.state, "waiting")
        spec = {"command": ["true"], "after": (prep,)}
        self.client.submit(spec, idempotency_key="train-v1")
        specs = [{"command": ["true"], "after": [prep]}, {"command": ["true"], "after": [self.EVAL, prep]}]
        self.client.submit_many(specs, progress=False)
        self.client.plan(command=["true"], after=[prep])
        self.assertEqual([s[:2] for s in self.seen], [("POST", "/v1/jobs"), ("POST", "/v1/jobs"),
                                                     ("POST", "/v1/jobs/batch"), ("POST", "/v1/plan")])
        self.assertEqual(self.seen[0][2], {"name": "train", "command": ["true"], "after": [self.PREP, self.EVAL]})
        self.assertEqual(self.seen[1][2]["after"], [self.PREP])
        self.assertEqual([j["after"] for j in self.seen[2][2]["jobs"]], [[self.PREP], [self.EVAL, self.PREP]])
        self.assertEqual(self.seen[3][2]["after"], [self.PREP])
        # The caller's specs are left as they were.
        self.assertEqual(spec["after"], (prep,))
        self.assertEqual(specs[0]["after"], [prep])

    def test_an_element_neither_an_id_nor_a_job_is_refused_before_any_request(self):
        prep = gpuq.Job.from_doc(self.job_doc(self.PREP, name="prep"))
        with self.assertRaises(TypeError) as caught:
            self.client.submit(command=["true"], after=[prep, 7])
        self.assertEqual(str(caught.exception), "after[1]: want a job id or a Job, got int")
        with self.assertRaisesRegex(TypeError, r"^after\[0\]: want a job id or a Job, got dict$"):
            self.client.submit({"command": ["true"], "after": [{"id": self.PREP}]})
        with self.assertRaisesRegex(TypeError, r"^after: want a list of job ids or Jobs, got Job$"):
            self.client.submit(command=["true"], after=prep)
        with self.assertRaisesRegex(TypeError, r"^after: want a list of job ids or Jobs, got str$"):
            self.client.submit(command=["true"], after=self.PREP)
        with self.assertRaisesRegex(TypeError, r"^specs\[1\]\.after\[0\]: want a job id or a Job, got NoneType$"):
            self.client.submit_many([{"command": ["true"], "after": [prep]}, {"command": ["true"], "after": [None]}],
                                    progress=False)
        self.assertEqual(self.seen, [])

    def test_status_reads_the_jobs_it_runs_after_in_the_specs_order(self):
        missing = "00000000-0000-0000-0000-000000000000"
        doc = {"job": self.job_doc(self.TRAIN, "waiting", "train", after=[self.PREP, self.EVAL, missing]),
               "attempts": [], "history": [],
               "after": [{"job_id": self.PREP, "name": "prep", "state": "succeeded"},
                         {"job_id": self.EVAL, "name": "eval", "state": "running"},
                         {"job_id": missing, "name": "", "state": ""}]}
        self.answers += [(200, doc), (200, {"job": self.job_doc(self.PREP, "running", "prep"), "attempts": [],
                                            "history": []})]
        st = self.client.status(self.TRAIN)
        self.assertEqual(self.seen[0][:2], ("GET", "/v1/jobs/%s/status" % self.TRAIN))
        self.assertEqual(st.job.state, "waiting")
        self.assertTrue(all(isinstance(d, gpuq.Dependency) for d in st.after), st.after)
        self.assertEqual([(d.job_id, d.name, d.state) for d in st.after],
                         [(self.PREP, "prep", "succeeded"), (self.EVAL, "eval", "running"), (missing, "", "")])
        self.assertEqual(st.after[1].raw, doc["after"][1])
        self.assertEqual(self.client.status(self.PREP).after, [])

    def test_after_ended_sends_jobs_as_their_ids(self):
        prep = gpuq.Job.from_doc(self.job_doc(self.PREP, name="prep"))
        train = gpuq.Job.from_doc(self.job_doc(self.TRAIN, name="train"))
        waiting = self.job_doc(self.EVAL, "waiting", "summary", after_ended=[self.PREP, self.TRAIN])
        self.answers += [(201, waiting), (201, waiting), (201, {"jobs": [{"job": waiting}, {"job": waiting}]}),
                         (200, {"feasible": True, "reason": ""})]
        summary = self.client.submit(name="summary", command=["true"], after_ended=[prep, self.TRAIN])
        self.assertEqual(summary.state, "waiting")
        spec = {"command": ["true"], "after": [prep], "after_ended": (train,)}
        self.client.submit(spec, idempotency_key="summary-v1")
        specs = [{"command": ["true"], "after_ended": [prep, train]}, {"command": ["true"], "after_ended": [self.PREP]}]
        self.client.submit_many(specs, progress=False)
        self.client.plan(command=["true"], after_ended=[train])
        self.assertEqual([s[:2] for s in self.seen], [("POST", "/v1/jobs"), ("POST", "/v1/jobs"),
                                                     ("POST", "/v1/jobs/batch"), ("POST", "/v1/plan")])
        self.assertEqual(self.seen[0][2], {"name": "summary", "command": ["true"],
                                           "after_ended": [self.PREP, self.TRAIN]})
        self.assertEqual((self.seen[1][2]["after"], self.seen[1][2]["after_ended"]), ([self.PREP], [self.TRAIN]))
        self.assertEqual([j["after_ended"] for j in self.seen[2][2]["jobs"]], [[self.PREP, self.TRAIN], [self.PREP]])
        self.assertEqual(self.seen[3][2]["after_ended"], [self.TRAIN])
        # The caller's specs are left as they were.
        self.assertEqual((spec["after"], spec["after_ended"]), ([prep], (train,)))
        self.assertEqual(specs[0]["after_ended"], [prep, train])

    def test_a_bad_element_in_after_ended_is_refused_before_any_request(self):
        prep = gpuq.Job.from_doc(self.job_doc(self.PREP, name="prep"))
        with self.assertRaises(TypeError) as caught:
            self.client.submit(command=["true"], after=[prep], after_ended=[7])
        self.assertEqual(str(caught.exception), "after_ended[0]: want a job id or a Job, got int")
        with self.assertRaisesRegex(TypeError, r"^after_ended: want a list of job ids or Jobs, got Job$"):
            self.client.submit({"command": ["true"], "after_ended": prep})
        with self.assertRaisesRegex(TypeError, r"^after_ended\[1\]: want a job id or a Job, got NoneType$"):
            self.client.plan(command=["true"], after_ended=[self.PREP, None])
        with self.assertRaisesRegex(TypeError, r"^specs\[1\]\.after_ended\[0\]: want a job id or a Job, got dict$"):
            self.client.submit_many([{"command": ["true"], "after_ended": [prep]},
                                     {"command": ["true"], "after_ended": [{"id": self.PREP}]}], progress=False)
        self.assertEqual(self.seen, [])

    @staticmethod
    def batch_id(i):
        return "01a24883-315e-70c4-b75c-ec8c7f9bd%03d" % i

    def batch_answer(self, first, specs):
        """The answer to a batch request of specs, the first numbered
        first: each job's id is batch_id of its place in the call."""
        return (201, {"jobs": [{"job": self.job_doc(self.batch_id(first + k), "placed", s.get("name", "n"))}
                               for k, s in enumerate(specs)]})

    def test_submit_many_fills_in_the_ids_of_earlier_specs_named_by_name(self):
        outside = gpuq.Job.from_doc(self.job_doc(self.EVAL, name="eval"))
        specs = [{"name": "prep", "command": ["sh", "-c", "echo prepared"]},
                 {"name": "train", "command": ["true"], "after": ["prep", self.PREP]},
                 {"name": "train", "command": ["true"], "after": ("prep",), "after_ended": [outside]},
                 {"name": "summary", "command": ["true"], "after": [outside], "after_ended": ["train", self.TRAIN]}]
        before = copy.deepcopy(specs)
        self.answers += [self.batch_answer(0, specs[:1]), self.batch_answer(1, specs[1:3]),
                         self.batch_answer(3, specs[3:])]
        jobs = self.client.submit_many(specs, progress=False)
        self.assertEqual([j.id for j in jobs], [self.batch_id(i) for i in range(4)])
        self.assertEqual([s[:2] for s in self.seen], [("POST", "/v1/jobs/batch")] * 3)
        self.assertEqual([len(s[2]["jobs"]) for s in self.seen], [1, 2, 1])
        sent = [j for s in self.seen for j in s[2]["jobs"]]
        self.assertEqual(sent[0], specs[0])
        # prep's id, in the place of its name; ids and Jobs pass through.
        self.assertEqual(sent[1]["after"], [self.batch_id(0), self.PREP])
        self.assertEqual((sent[2]["after"], sent[2]["after_ended"]), ([self.batch_id(0)], [self.EVAL]))
        # "train" stands for both earlier specs of that name, in order.
        self.assertEqual((sent[3]["after"], sent[3]["after_ended"]),
                         ([self.EVAL], [self.batch_id(1), self.batch_id(2), self.TRAIN]))
        # The caller's specs are left as they were.
        self.assertEqual(specs, before)
        self.assertIs(specs[2]["after_ended"][0], outside)

    def test_a_request_is_cut_at_the_bound_and_before_a_spec_naming_one_of_it(self):
        specs = [{"name": "a", "command": ["true"]},
                 {"name": "b", "command": ["true"]},
                 {"name": "c", "command": ["true"], "after": ["a"]},   # a is in this request: cut before c
                 {"name": "d", "command": ["true"]},
                 {"name": "e", "command": ["true"], "after": ["b"]},   # b was in the request before
                 {"name": "f", "command": ["true"]},                   # three to a request: cut before f
                 {"name": "g", "command": ["true"], "after_ended": ["d", "f"]},  # f is in this request
                 {"name": "h", "command": ["true"], "after_ended": ["g"]}]       # g too
        self.answers += [self.batch_answer(0, specs[0:2]), self.batch_answer(2, specs[2:5]),
                         self.batch_answer(5, specs[5:6]), self.batch_answer(6, specs[6:7]),
                         self.batch_answer(7, specs[7:8])]
        with mock.patch("gpuq.client._BATCH_JOBS", 3):
            jobs = self.client.submit_many(specs, progress=False)
        self.assertEqual([len(s[2]["jobs"]) for s in self.seen], [2, 3, 1, 1, 1])
        self.assertEqual([j.id for j in jobs], [self.batch_id(i) for i in range(8)])
        sent = [j for s in self.seen for j in s[2]["jobs"]]
        self.assertEqual([j["name"] for j in sent], list("abcdefgh"))
        self.assertEqual([sent[2]["after"], sent[4]["after"], sent[6]["after_ended"], sent[7]["after_ended"]],
                         [[self.batch_id(0)], [self.batch_id(1)], [self.batch_id(3), self.batch_id(5)],
                          [self.batch_id(6)]])

    def test_a_refused_request_after_a_cut_names_the_spec_by_its_place_in_specs(self):
        specs = [{"name": "prep", "command": ["true"]},
                 {"name": "train", "command": ["true"], "after": ["prep"]},
                 {"name": "train", "command": ["true"], "after": ["prep"], "resources": {"gpu": {"count": 0}}}]
        problem = {"title": "Unprocessable Entity", "status": 422,
                   "errors": [{"location": "body.jobs[1].resources.gpu.count", "message": "must be 1 or more"}]}
        self.answers += [self.batch_answer(0, specs[:1]), (422, problem)]
        with self.assertRaises(gpuq.InvalidRequest) as caught:
            self.client.submit_many(specs, progress=False)
        self.assertEqual(caught.exception.fields, {"body.jobs[2].resources.gpu.count": "must be 1 or more"})
        self.assertEqual([len(s[2]["jobs"]) for s in self.seen], [1, 2])
        self.assertEqual([j["after"] for j in self.seen[1][2]["jobs"]], [[self.batch_id(0)]] * 2)

    def test_a_name_of_no_earlier_spec_is_refused_before_any_request(self):
        prep = gpuq.Job.from_doc(self.job_doc(self.PREP, name="prep"))
        with self.assertRaises(ValueError) as caught:
            self.client.submit_many([{"name": "train", "command": ["true"], "after": [prep]},
                                     {"name": "train", "command": ["true"]},
                                     {"name": "eval", "command": ["true"], "after": ["train"]},
                                     {"name": "summary", "command": ["true"], "after_ended": ["trian"]}],
                                    progress=False)
        self.assertEqual(str(caught.exception),
                         'specs[3].after_ended[0]: no job named "trian" before it in specs: a job names the jobs '
                         'it runs after by their id (or Job), or jobs earlier in specs by their name')
        # A later spec, or the spec itself, is not before it.
        with self.assertRaisesRegex(ValueError, r'^specs\[0\]\.after\[1\]: no job named "train" before it'):
            self.client.submit_many([{"name": "eval", "command": ["true"], "after": [self.PREP, "train"]},
                                     {"name": "train", "command": ["true"]}], progress=False)
        with self.assertRaisesRegex(ValueError, r'^specs\[0\]\.after\[0\]: no job named "prep" before it'):
            self.client.submit_many([{"name": "prep", "command": ["true"], "after": ["prep"]}], progress=False)
        # A job id not in its lower-case form is no job id: it is taken for a name.
        with self.assertRaisesRegex(ValueError, r'^specs\[0\]\.after\[0\]: no job named "%s" before it'
                                    % self.PREP.upper()):
            self.client.submit_many([{"command": ["true"], "after": [self.PREP.upper()]}], progress=False)
        # A spec named twice, in one list or in both, is refused as the server would refuse its id.
        with self.assertRaisesRegex(ValueError, r'^specs\[2\]\.after_ended\[0\]: "train" names specs\[1\], '
                                                r'which the spec names already$'):
            self.client.submit_many([{"name": "prep", "command": ["true"]},
                                     {"name": "train", "command": ["true"]},
                                     {"name": "eval", "command": ["true"], "after": ["train"],
                                      "after_ended": ["train"]}], progress=False)
        # Workdirs are not shipped either: nothing was asked of the server.
        with tempfile.TemporaryDirectory() as d:
            with self.assertRaises(ValueError):
                self.client.submit_many([{"name": "prep", "command": ["true"], "workdir": d},
                                         {"command": ["true"], "after": ["perp"]}], progress=False)
        self.assertEqual(self.seen, [])

    def test_inputs_send_the_jobs_they_read_as_their_ids(self):
        prep = gpuq.Job.from_doc(self.job_doc(self.PREP, name="prep"))
        data = {"name": "imagenet", "uri": "s3://bucket/imagenet", "bytes": 1000}
        waiting = self.job_doc(self.TRAIN, "waiting", "train", after=[self.PREP])
        self.answers += [(201, waiting), (201, waiting), (201, {"jobs": [{"job": waiting}, {"job": waiting}]}),
                         (200, {"feasible": True, "reason": ""})]
        self.client.submit(name="train", command=["true"], inputs=[{"name": "p", "job": prep}, data])
        spec = {"command": ["true"], "inputs": ({"job": prep},), "after": [prep]}
        self.client.submit(spec, idempotency_key="train-v1")
        specs = [{"command": ["true"], "inputs": [{"name": "p", "job": self.PREP}]},
                 {"command": ["true"], "inputs": [data, {"job": prep}]}]
        self.client.submit_many(specs, progress=False)
        self.client.plan(command=["true"], inputs=[{"name": "p", "job": prep}])
        self.assertEqual([s[:2] for s in self.seen], [("POST", "/v1/jobs"), ("POST", "/v1/jobs"),
                                                     ("POST", "/v1/jobs/batch"), ("POST", "/v1/plan")])
        self.assertEqual(self.seen[0][2], {"name": "train", "command": ["true"],
                                           "inputs": [{"name": "p", "job": self.PREP}, data]})
        # A job named in after too is sent in both, for the server to add it to after once.
        self.assertEqual((self.seen[1][2]["inputs"], self.seen[1][2]["after"]), ([{"job": self.PREP}], [self.PREP]))
        self.assertEqual([j["inputs"] for j in self.seen[2][2]["jobs"]],
                         [[{"name": "p", "job": self.PREP}], [data, {"job": self.PREP}]])
        self.assertEqual(self.seen[3][2]["inputs"], [{"name": "p", "job": self.PREP}])
        # The caller's specs are left as they were.
        self.assertEqual(spec["inputs"], ({"job": prep},))
        self.assertIs(spec["inputs"][0]["job"], prep)
        self.assertIs(specs[1]["inputs"][1]["job"], prep)
        self.assertEqual(data, {"name": "imagenet", "uri": "s3://bucket/imagenet", "bytes": 1000})

    def test_a_bad_input_is_refused_before_any_request(self):
        prep = gpuq.Job.from_doc(self.job_doc(self.PREP, name="prep"))
        with self.assertRaises(TypeError) as caught:
            self.client.submit(command=["true"], inputs=[{"job": prep}, {"name": "p", "job": 7}])
        self.assertEqual(str(caught.exception), "inputs[1].job: want a job id or a Job, got int")
        with self.assertRaisesRegex(TypeError, r"^inputs\[0\]: want a dict \(an input\), got Job$"):
            self.client.submit({"command": ["true"], "inputs": [prep]})
        with self.assertRaisesRegex(TypeError, r"^inputs\[0\]: want a dict \(an input\), got str$"):
            self.client.plan(command=["true"], inputs=[self.PREP])
        with self.assertRaisesRegex(TypeError, r"^specs\[3\]\.inputs\[0\]\.job: want a job id or a Job, "
                                               r"got NoneType$"):
            self.client.submit_many([{"name": "prep", "command": ["true"]}, {"command": ["true"]},
                                     {"command": ["true"], "inputs": [{"job": "prep"}]},
                                     {"command": ["true"], "inputs": [{"name": "p", "job": None}]}], progress=False)
        with self.assertRaisesRegex(TypeError, r"^specs\[0\]\.inputs\[1\]: want a dict \(an input\), got list$"):
            self.client.submit_many([{"command": ["true"], "inputs": [{"job": prep}, ["prep"]]}], progress=False)
        self.assertEqual(self.seen, [])

    def test_submit_many_fills_in_inputs_naming_earlier_specs_by_name(self):
        outside = gpuq.Job.from_doc(self.job_doc(self.EVAL, name="eval"))
        data = {"name": "imagenet", "uri": "s3://bucket/imagenet"}
        specs = [{"name": "prep", "command": ["true"]},
                 {"name": "train", "command": ["true"], "inputs": [{"job": "prep"}, data]},
                 {"name": "train", "command": ["true"], "inputs": [{"name": "p", "job": "prep"}], "after": ["prep"]},
                 {"name": "eval", "command": ["true"],
                  "inputs": [{"job": "train"}, {"job": outside}, {"name": "q", "job": self.PREP}]},
                 {"name": "summary", "command": ["true"], "inputs": [{"name": "model", "job": "train"}],
                  "after_ended": ["train"]}]
        before = copy.deepcopy(specs)
        self.answers += [self.batch_answer(0, specs[:1]), self.batch_answer(1, specs[1:3]),
                         self.batch_answer(3, specs[3:])]
        jobs = self.client.submit_many(specs, progress=False)
        self.assertEqual([j.id for j in jobs], [self.batch_id(i) for i in range(5)])
        # train names prep, of the first request, and eval the train runs, of the second.
        self.assertEqual([len(s[2]["jobs"]) for s in self.seen], [1, 2, 2])
        sent = [j for s in self.seen for j in s[2]["jobs"]]
        # A name of one spec: its job, the entry named as it is unless it says otherwise.
        self.assertEqual(sent[1]["inputs"], [{"name": "prep", "job": self.batch_id(0)}, data])
        self.assertEqual((sent[2]["inputs"], sent[2]["after"]),
                         ([{"name": "p", "job": self.batch_id(0)}], [self.batch_id(0)]))
        # A name of two specs: two entries, numbered, in order; Jobs and ids pass through.
        self.assertEqual(sent[3]["inputs"], [{"name": "train-1", "job": self.batch_id(1)},
                                             {"name": "train-2", "job": self.batch_id(2)},
                                             {"job": self.EVAL}, {"name": "q", "job": self.PREP}])
        self.assertEqual((sent[4]["inputs"], sent[4]["after_ended"]),
                         ([{"name": "model-1", "job": self.batch_id(1)}, {"name": "model-2", "job": self.batch_id(2)}],
                          [self.batch_id(1), self.batch_id(2)]))
        # The caller's specs are left as they were.
        self.assertEqual(specs, before)
        self.assertIs(specs[3]["inputs"][1]["job"], outside)

    def test_a_request_is_cut_before_a_spec_naming_one_of_it_in_inputs(self):
        specs = [{"name": "a", "command": ["true"]},
                 {"name": "b", "command": ["true"], "inputs": [{"job": "a"}]},    # a is in this request: cut
                 {"name": "c", "command": ["true"]},
                 {"name": "d", "command": ["true"], "inputs": [{"name": "x", "job": "a"}]},  # a was before
                 {"name": "e", "command": ["true"], "inputs": [{"job": "c"}]}]    # c is in this request: cut
        self.answers += [self.batch_answer(0, specs[0:1]), self.batch_answer(1, specs[1:4]),
                         self.batch_answer(4, specs[4:5])]
        jobs = self.client.submit_many(specs, progress=False)
        self.assertEqual([len(s[2]["jobs"]) for s in self.seen], [1, 3, 1])
        self.assertEqual([j.id for j in jobs], [self.batch_id(i) for i in range(5)])
        sent = [j for s in self.seen for j in s[2]["jobs"]]
        self.assertEqual([sent[1]["inputs"], sent[3]["inputs"], sent[4]["inputs"]],
                         [[{"name": "a", "job": self.batch_id(0)}], [{"name": "x", "job": self.batch_id(0)}],
                          [{"name": "c", "job": self.batch_id(2)}]])

    def test_an_input_naming_no_earlier_spec_is_refused_before_any_request(self):
        with self.assertRaises(ValueError) as caught:
            self.client.submit_many([{"name": "prep", "command": ["true"]},
                                     {"name": "train", "command": ["true"], "inputs": [{"job": "prep"}]},
                                     {"name": "train", "command": ["true"], "after": ["prep"]},
                                     {"name": "eval", "command": ["true"],
                                      "inputs": [{"job": "train"}, {"name": "p", "job": "perp"}]}],
                                    progress=False)
        self.assertEqual(str(caught.exception),
                         'specs[3].inputs[1].job: no job named "perp" before it in specs: an input names the job '
                         'whose outputs it reads by its id (or Job), or a job earlier in specs by its name')
        # One earlier spec is read by one input.
        with self.assertRaisesRegex(ValueError, r'^specs\[1\]\.inputs\[1\]\.job: "prep" names specs\[0\], whose outputs an '
                                    r'input reads already$'):
            self.client.submit_many([{"name": "prep", "command": ["true"]},
                                     {"command": ["true"], "inputs": [{"job": "prep"}, {"name": "again", "job": "prep"}]}],
                                    progress=False)
        # A later spec, or the spec itself, is not before it.
        with self.assertRaisesRegex(ValueError, r'^specs\[0\]\.inputs\[0\]\.job: no job named "train" before it'):
            self.client.submit_many([{"name": "eval", "command": ["true"], "inputs": [{"job": "train"}]},
                                     {"name": "train", "command": ["true"]}], progress=False)
        with self.assertRaisesRegex(ValueError, r'^specs\[0\]\.inputs\[0\]\.job: no job named "prep" before it'):
            self.client.submit_many([{"name": "prep", "command": ["true"], "inputs": [{"job": "prep"}]}],
                                    progress=False)
        # A job id not in its lower-case form is no job id: it is taken for a name.
        with self.assertRaisesRegex(ValueError, r'^specs\[0\]\.inputs\[0\]\.job: no job named "%s" before it'
                                    % self.PREP.upper()):
            self.client.submit_many([{"command": ["true"], "inputs": [{"job": self.PREP.upper()}]}],
                                    progress=False)
        self.assertEqual(self.seen, [])

    def test_status_reads_the_jobs_it_runs_after_ended_in_the_specs_order(self):
        missing = "00000000-0000-0000-0000-000000000000"
        doc = {"job": self.job_doc(self.TRAIN, "waiting", "summary", after=[self.EVAL],
                                   after_ended=[self.PREP, missing]),
               "attempts": [], "history": [],
               "after": [{"job_id": self.EVAL, "name": "eval", "state": "succeeded"}],
               "after_ended": [{"job_id": self.PREP, "name": "prep", "state": "failed"},
                               {"job_id": missing, "name": "", "state": ""}]}
        self.answers += [(200, doc), (200, {"job": self.job_doc(self.PREP, "failed", "prep"), "attempts": [],
                                            "history": []})]
        st = self.client.status(self.TRAIN)
        self.assertTrue(all(isinstance(d, gpuq.Dependency) for d in st.after_ended), st.after_ended)
        self.assertEqual([(d.job_id, d.name, d.state) for d in st.after_ended],
                         [(self.PREP, "prep", "failed"), (missing, "", "")])
        self.assertEqual([(d.job_id, d.state) for d in st.after], [(self.EVAL, "succeeded")])
        self.assertEqual(st.after_ended[0].raw, doc["after_ended"][0])
        self.assertEqual(st.dependents, [])
        prep = self.client.status(self.PREP)
        self.assertEqual(prep.after_ended, [])

    def test_status_reads_the_jobs_that_run_after_it(self):
        doc = {"job": self.job_doc(self.PREP, "failed", "prep"), "attempts": [], "history": [],
               "dependents": [{"job_id": self.TRAIN, "name": "train", "state": "cancelled"},
                              {"job_id": self.EVAL, "name": "eval", "state": "cancelled"}]}
        self.answers.append((200, doc))
        st = self.client.status(self.PREP)
        self.assertTrue(all(isinstance(d, gpuq.Dependency) for d in st.dependents), st.dependents)
        self.assertEqual([(d.job_id, d.name, d.state) for d in st.dependents],
                         [(self.TRAIN, "train", "cancelled"), (self.EVAL, "eval", "cancelled")])

    def test_retry_label_retries_a_pipeline_in_the_order_it_was_submitted(self):
        def at(doc, second):
            return dict(doc, submitted_at="2026-12-07T10:00:%02d.5Z" % second)
        # The server lists each state newest first: eval (cancelled after
        # train was) would be retried before train, whose own retry it waits for.
        self.answers += [(200, {"jobs": [at(self.job_doc(self.PREP, "failed"), 1)]}), (200, {"jobs": []}),
                         (200, {"jobs": [at(self.job_doc(self.EVAL, "cancelled"), 3), at(self.job_doc(self.TRAIN, "cancelled"), 2)]}),
                         (200, {"jobs": []})]
        self.answers += [(200, self.job_doc(self.PREP, "placed")), (200, self.job_doc(self.TRAIN, "waiting")),
                         (200, self.job_doc(self.EVAL, "waiting"))]
        retried = self.client.retry_label("pipe=a")
        self.assertEqual([j.id for j in retried], [self.PREP, self.TRAIN, self.EVAL])
        self.assertEqual([path.split("?")[0] for method, path, _ in self.seen if method == "POST"],
                         ["/v1/jobs/%s/retry" % j for j in (self.PREP, self.TRAIN, self.EVAL)])

    def test_cancel_label_cancels_waiting_jobs_too(self):
        listed = {"pending": [], "waiting": [self.job_doc(self.TRAIN, "waiting")], "placed": [self.job_doc(self.EVAL)],
                  "running": []}
        for state in ("pending", "waiting"):
            self.answers.append((200, {"jobs": listed[state]}))
        self.answers.append((200, self.job_doc(self.TRAIN, "cancelled")))
        self.answers.append((200, {"jobs": listed["placed"]}))
        self.answers.append((200, self.job_doc(self.EVAL, "cancelled")))
        self.answers.append((200, {"jobs": []}))
        cancelled = self.client.cancel_label("sweep=lr")
        self.assertEqual([(j.id, j.state) for j in cancelled], [(self.TRAIN, "cancelled"), (self.EVAL, "cancelled")])
        asked = [urllib.parse.parse_qs(urllib.parse.urlsplit(path).query).get("state", [""])[0] or path
                 for method, path, _ in self.seen]
        self.assertEqual(asked, ["pending", "waiting", "/v1/jobs/%s/cancel" % self.TRAIN, "placed",
                                 "/v1/jobs/%s/cancel" % self.EVAL, "running"])

    REPORT = "01a24883-315e-70c4-b75c-ec8c7f9bdf55"
    SUMMARY = "01a24883-315e-70c4-b75c-ec8c7f9bdf56"

    @staticmethod
    def at(doc, second):
        return dict(doc, submitted_at="2026-12-07T10:00:%02d.5Z" % second)

    def asked(self):
        """Each request: a listing as ("list", its query), a job read, a
        retry or a cancel as ("get", "retry" or "cancel", the job's id, its
        query)."""
        out = []
        for method, path, _ in self.seen:
            split = urllib.parse.urlsplit(path)
            query = urllib.parse.parse_qs(split.query)
            if method == "GET" and split.path == "/v1/jobs":
                out.append(("list", query))
            elif method == "GET":
                out.append(("get", split.path.split("/")[3], query))
            else:
                kind = split.path.rsplit("/", 1)[1]
                self.assertEqual(method, "POST", path)
                self.assertIn(kind, ("retry", "cancel"), path)
                out.append((kind, split.path.split("/")[3], query))
        return out

    def test_list_sends_runs_after_as_the_jobs_id(self):
        prep = gpuq.Job.from_doc(self.job_doc(self.PREP, "failed", "prep"))
        self.answers += [(200, {"jobs": [self.job_doc(self.TRAIN, "cancelled", "train", after=[self.PREP])]}),
                         (200, {"jobs": []}), (200, {"jobs": []})]
        listed = self.client.list(runs_after=prep)
        self.assertEqual([j.id for j in listed], [self.TRAIN])
        self.client.list(runs_after=self.PREP, state="cancelled", project="vision")
        self.client.list()
        self.assertEqual([q for _, q in self.asked()], [
            {"runs_after": [self.PREP], "limit": ["50"]},
            {"runs_after": [self.PREP], "state": ["cancelled"], "project": ["vision"], "limit": ["50"]},
            {"limit": ["50"]}])

    def test_retry_downstream_retries_the_jobs_after_it_in_the_order_they_were_submitted(self):
        at = self.at
        # prep <- train <- eval (which runs after prep too) <- summary;
        # prep <- report, which succeeded. The server lists newest first:
        # eval comes before train, whose retry eval's waits for.
        self.answers += [
            (200, {"jobs": [at(self.job_doc(self.REPORT, "succeeded", after=[self.PREP]), 4),
                            at(self.job_doc(self.EVAL, "cancelled", after=[self.PREP, self.TRAIN]), 3),
                            at(self.job_doc(self.TRAIN, "cancelled", after=[self.PREP]), 2)]}),
            (200, {"jobs": [at(self.job_doc(self.SUMMARY, "cancelled", after_ended=[self.EVAL]), 6)]}),
            (200, {"jobs": [at(self.job_doc(self.EVAL, "cancelled", after=[self.PREP, self.TRAIN]), 3)]}),
            (200, {"jobs": []}),
            (200, self.job_doc(self.PREP, "placed")), (200, self.job_doc(self.TRAIN, "waiting")),
            (200, self.job_doc(self.EVAL, "waiting")),
            # summary was retried meanwhile by someone else.
            (409, {"title": "Conflict", "status": 409, "detail": "job is waiting"})]
        retried = self.client.retry_downstream(self.PREP, fresh=True)
        self.assertEqual([(j.id, j.state) for j in retried],
                         [(self.PREP, "placed"), (self.TRAIN, "waiting"), (self.EVAL, "waiting")])
        asked = self.asked()
        # Each job found is listed after once; report, which succeeded, is not.
        self.assertEqual([(q["runs_after"], q["limit"]) for kind, q, *_ in asked if kind == "list"],
                         [([j], ["500"]) for j in (self.PREP, self.EVAL, self.TRAIN, self.SUMMARY)])
        self.assertEqual([a[1:] for a in asked if a[0] == "retry"],
                         [(j, {"fresh": ["true"]}) for j in (self.PREP, self.TRAIN, self.EVAL, self.SUMMARY)])
        self.assertEqual(self.answers, [])

    def test_cancel_downstream_cancels_the_jobs_after_it_newest_first_then_it(self):
        at = self.at
        # prep <- train <- eval (after train ended); prep <- report, which
        # succeeded and is not looked past.
        self.answers += [
            (200, {"jobs": [at(self.job_doc(self.REPORT, "succeeded", after=[self.PREP]), 4),
                            at(self.job_doc(self.TRAIN, "waiting", after=[self.PREP]), 2)]}),
            (200, {"jobs": [at(self.job_doc(self.EVAL, "waiting", after_ended=[self.TRAIN]), 3)]}),
            (200, {"jobs": []}),
            (200, self.job_doc(self.EVAL, "cancelled")),
            # train finished meanwhile.
            (409, {"title": "Conflict", "status": 409, "detail": "job already finished"}),
            (200, self.job_doc(self.PREP, "cancelled"))]
        cancelled = self.client.cancel_downstream(self.PREP)
        self.assertEqual([(j.id, j.state) for j in cancelled], [(self.EVAL, "cancelled"), (self.PREP, "cancelled")])
        asked = self.asked()
        self.assertEqual([q["runs_after"] for kind, q, *_ in asked if kind == "list"], [[self.PREP], [self.TRAIN], [self.EVAL]])
        self.assertEqual([a[1] for a in asked if a[0] == "cancel"], [self.EVAL, self.TRAIN, self.PREP])
        self.assertEqual(self.answers, [])

    def test_retry_downstream_of_a_job_with_nothing_after_it_retries_it_alone(self):
        prep = gpuq.Job.from_doc(self.job_doc(self.PREP, "failed", "prep"))
        self.answers += [(200, {"jobs": [self.job_doc(self.TRAIN, "running", after=[self.PREP])]}),
                         (200, self.job_doc(self.PREP, "placed"))]
        retried = self.client.retry_downstream(prep)
        self.assertEqual([j.id for j in retried], [self.PREP])
        self.assertEqual([a[0:2] for a in self.asked()], [("list", {"runs_after": [self.PREP], "limit": ["500"]}),
                                                          ("retry", self.PREP)])

    def test_retry_downstream_raises_the_jobs_own_conflict_and_retries_nothing_after_it(self):
        prep = gpuq.Job.from_doc(self.job_doc(self.PREP, "running", "prep"))
        self.answers += [(200, {"jobs": [self.job_doc(self.TRAIN, "cancelled", after=[self.PREP])]}),
                         (200, {"jobs": []}),
                         (409, {"title": "Conflict", "status": 409, "detail": "job is running"}),
                         (200, self.job_doc(self.PREP, "running"))]
        with self.assertRaises(gpuq.Conflict):
            self.client.retry_downstream(prep)
        self.assertEqual([a[1] for a in self.asked() if a[0] == "retry"], [self.PREP])
        self.assertEqual(self.answers, [])

    def test_retry_downstream_of_a_job_that_succeeded_retries_the_jobs_after_it(self):
        self.answers += [(200, {"jobs": [self.job_doc(self.TRAIN, "failed", after=[self.PREP])]}),
                         (200, {"jobs": []}),
                         (409, {"title": "Conflict", "status": 409, "detail": "job succeeded"}),
                         (200, self.job_doc(self.PREP, "succeeded")),
                         (200, self.job_doc(self.TRAIN, "placed"))]
        retried = self.client.retry_downstream(self.PREP)
        self.assertEqual([(j.id, j.state) for j in retried], [(self.TRAIN, "placed")])
        self.assertEqual([a[:2] for a in self.asked() if a[0] != "list"],
                         [("retry", self.PREP), ("get", self.PREP), ("retry", self.TRAIN)])
        self.assertEqual(self.answers, [])

    def test_cancel_downstream_of_a_job_that_finished_cancels_the_jobs_after_it(self):
        self.answers += [(200, {"jobs": [self.job_doc(self.TRAIN, "waiting", after_ended=[self.PREP])]}),
                         (200, {"jobs": []}),
                         (200, self.job_doc(self.TRAIN, "cancelled")),
                         (409, {"title": "Conflict", "status": 409, "detail": "job already finished"}),
                         (200, self.job_doc(self.PREP, "failed"))]
        cancelled = self.client.cancel_downstream(self.PREP)
        self.assertEqual([(j.id, j.state) for j in cancelled], [(self.TRAIN, "cancelled")])
        self.assertEqual(self.answers, [])
