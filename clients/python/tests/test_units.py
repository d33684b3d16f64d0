"""Parts of the client that need no server: progress display, problem
details, configuration, file paths, times, and the checkpoint protocol's
refusal outside a job."""

from __future__ import annotations

import http.server
import io
import json
import os
import tempfile
import threading
import time
import unittest
from unittest import mock

import gpuq
from gpuq.client import _inside, _read_config
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
