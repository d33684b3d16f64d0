"""The client against a real `gpuq dev`, started as the README starts it.

GPUQ_BIN names the gpuq binary (make test-python builds it) and GPUQ_README
the README whose "Python" section's examples these tests run as written.
"""

from __future__ import annotations

import contextlib
import http.server
import io
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import unittest
import urllib.parse
from datetime import datetime, timedelta, timezone

import gpuq
import gpuq.workdir

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.abspath(os.path.join(HERE, "..", "..", ".."))
GPUQ_BIN = os.environ.get("GPUQ_BIN", os.path.join(REPO, "bin", "gpuq"))
README = os.environ.get("GPUQ_README", os.path.join(REPO, "README.md"))

dev = None
dev_log_file = None
workdir = None
client = None


def readme_examples():
    """The python code blocks of the README's "Python" section."""
    with open(README, encoding="utf-8") as f:
        text = f.read()
    section = re.search(r"^## Python\n(.*?)^## ", text, re.S | re.M)
    if not section:
        raise AssertionError("README.md has no \"## Python\" section")
    return re.findall(r"^```python\n(.*?)^```", section.group(1), re.S | re.M)


def setUpModule():
    global dev, dev_log_file, workdir, client
    if not os.access(GPUQ_BIN, os.X_OK):
        raise unittest.SkipTest("no gpuq binary at %s; run make build (make test-python does)" % GPUQ_BIN)
    workdir = tempfile.mkdtemp(prefix="gpuq-python-")
    dev_log_file = open(os.path.join(workdir, "dev.log"), "wb")
    dev = start_dev()
    os.chdir(workdir)
    client = gpuq.Client.from_env()


def start_dev(*args):
    """`gpuq dev` with args, as the README's quick start runs it: in the
    directory where the client then runs; it writes .gpuq/config.yaml
    there."""
    env = dict(os.environ)
    for k in ("GPUQ_URL", "GPUQ_TOKEN", "GPUQ_CONFIG", "GPUQ_NATS_URL", "GPUQ_DATABASE_URL"):
        env.pop(k, None)
    # gpuq dev's workers read GPUQ_ACK_WAIT like any setting: a short
    # AckWait makes the job of a worker killed without notice come back in
    # seconds instead of the default 30 s.
    env["GPUQ_ACK_WAIT"] = "3s"
    proc = subprocess.Popen([GPUQ_BIN, "dev", *args], cwd=workdir, env=env, stdout=subprocess.PIPE,
                            stderr=dev_log_file, start_new_session=True)
    config = os.path.join(workdir, ".gpuq", "config.yaml")
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        line = proc.stdout.readline().decode()
        if "gpuq dev is running" in line or proc.poll() is not None:
            break
    if proc.poll() is not None or not os.path.exists(config):
        raise AssertionError("gpuq dev did not start:\n" + dev_log())
    return proc


def tearDownModule():
    if dev is not None:
        os.killpg(dev.pid, signal.SIGTERM)
        try:
            dev.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(dev.pid, signal.SIGKILL)
            dev.wait()
        dev.stdout.close()
        dev_log_file.close()
    if workdir:
        os.chdir(HERE)
        shutil.rmtree(workdir, ignore_errors=True)


def dev_log():
    with open(os.path.join(workdir, "dev.log"), encoding="utf-8", errors="replace") as f:
        return f.read()[-8000:]


def forget_secret(name, project="default"):
    """Deletes a project's secret a test set, if it is still set."""
    try:
        client.delete_secret(name, project=project)
    except gpuq.NotFound:
        pass


class InstallTest(unittest.TestCase):
    def test_the_tests_use_the_installed_package(self):
        if os.environ.get("GPUQ_TEST_INSTALLED") != "1":
            self.skipTest("run through make test-python to check the installed package")
        self.assertIn("site-packages", gpuq.__file__)


class ClientTest(unittest.TestCase):
    def test_readme_example_submits_waits_reads_logs_and_results(self):
        hello = readme_examples()[0]
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            exec(compile(hello, "README.md (Python)", "exec"), {})  # noqa: S102 - the README's example, run as written
        self.assertIn("succeeded ['succeeded']", out.getvalue())
        self.assertIn("hello from gpuq\n", out.getvalue())
        self.assertIn("42\n", out.getvalue())
        with open(os.path.join(workdir, "out", "answer.txt")) as f:
            self.assertEqual(f.read(), "42\n")

    def test_a_killed_worker_is_replaced_and_the_job_resumes_from_its_checkpoint(self):
        script = readme_examples()[1]
        # The README's checkpointing example as a job, run by this
        # virtualenv's python, where the gpuq package is installed.
        job = client.submit(name="resume", command=[sys.executable, "-c", script], env={"STEPS": "40"},
                            retries={"max_errors": 0})
        deadline = time.monotonic() + 120
        while len(client.checkpoints(job.id)) < 3:
            self.assertLess(time.monotonic(), deadline, "no 3 checkpoints in time:\n" + dev_log())
            time.sleep(0.2)
        first = client.status(job.id)
        self.assertEqual(len(first.attempts), 1)
        # Read before the kill: the control plane keeps a job's latest
        # checkpoints only, so attempt 2's saves prune attempt 1's.
        saved = max(c.seq for c in client.checkpoints(job.id) if c.attempt == 1)
        # The attempt's pid is its worker's; SIGKILL gives it no notice.
        os.kill(first.attempts[0].pid, signal.SIGKILL)
        done = client.wait(job.id, timeout=180, progress=False)
        self.assertEqual(done.state, "succeeded", done.reason)

        st = client.status(job.id)
        self.assertEqual([a.outcome for a in st.attempts], ["lost", "succeeded"])
        cps = client.checkpoints(job.id)
        self.assertEqual([c.seq for c in cps], sorted(c.seq for c in cps))
        logs = "".join(c.data for c in client.logs(job.id))
        m = re.search(r"attempt 2 starts at step (\d+)", logs)
        self.assertIsNotNone(m, logs)
        self.assertGreaterEqual(int(m.group(1)), 3, "attempt 2 must resume from a checkpoint of attempt 1 (seq %d)" % saved)
        self.assertIn("attempt 1 starts at step 0", logs)
        res = client.results(job.id, os.path.join(workdir, "resume-out"))
        with open(res.files[0].local_path) as f:
            self.assertEqual(f.read(), "40")

    def test_resubmitting_with_an_idempotency_key_returns_the_same_job(self):
        spec = {"name": "idem", "command": ["true"]}
        a = client.submit(spec, idempotency_key="cell-7")
        b = client.submit(spec, idempotency_key="cell-7")
        self.assertEqual(a.id, b.id)
        with self.assertRaises(gpuq.Conflict) as caught:
            client.submit({"name": "idem", "command": ["false"]}, idempotency_key="cell-7")
        self.assertIn("spec.idempotency_key", caught.exception.fields)

    def test_a_bad_spec_raises_an_error_naming_the_field(self):
        with self.assertRaises(gpuq.InvalidRequest) as caught:
            client.submit(command=["python", "train.py"], resources={"gpu": {"count": 0}})
        err = caught.exception
        self.assertEqual(err.status, 422)
        self.assertIn("spec.resources.gpu.count", err.fields)
        self.assertIn("spec.resources.gpu.count: must be 1–16, got 0", str(err))
        with self.assertRaises(gpuq.InvalidRequest) as caught:
            client.submit(command=["true"], resources={"gpus": 1})
        self.assertIn("spec.resources.gpus", caught.exception.fields)

    def test_following_logs_ends_when_the_job_ends(self):
        job = client.submit(name="talker", command=["sh", "-c", "for i in 1 2 3 4 5; do echo line $i; sleep 0.3; done"])
        started = time.monotonic()
        text = "".join(c.data for c in client.logs(job.id, follow=True))
        self.assertLess(time.monotonic() - started, 60)
        self.assertEqual(text, "".join("line %d\n" % i for i in range(1, 6)))
        self.assertTrue(client.get(job.id).done)

    def test_wait_times_out_and_cancel_and_missing_jobs_raise(self):
        job = client.submit(name="sleeper", command=["sleep", "30"])
        with self.assertRaises(gpuq.WaitTimeout):
            client.wait(job.id, timeout=1, progress=False)
        cancelled = client.cancel(job.id)
        self.assertEqual(cancelled.state, "cancelled")
        with self.assertRaises(gpuq.Conflict):
            client.cancel(job.id)
        with self.assertRaises(gpuq.NotFound):
            client.get("00000000-0000-4000-8000-000000000000")

    def test_cancel_label_cancels_the_unfinished_jobs_of_a_sweep(self):
        sweep = "cancel-%d" % time.monotonic_ns()
        done = client.submit(name="sweep-done", command=["true"], labels={"sweep": sweep})
        client.wait(done.id, timeout=60, progress=False)
        jobs = [client.submit(name="sweep", command=["sleep", "60"], labels={"sweep": sweep}) for _ in range(3)]
        other = client.submit(name="other", command=["sleep", "60"], labels={"sweep": sweep + "-other"})
        cancelled = client.cancel_label("sweep=" + sweep)
        self.assertEqual(sorted(j.id for j in cancelled), sorted(j.id for j in jobs))
        self.assertTrue(all(j.state == "cancelled" for j in cancelled))
        self.assertEqual(client.get(done.id).state, "succeeded")
        self.assertFalse(client.get(other.id).done)
        self.assertEqual(client.cancel_label("sweep=" + sweep), [])
        client.cancel(other.id)
        with self.assertRaises(ValueError):
            client.cancel_label("sweep")

    def test_retry_runs_a_failed_job_again_from_its_checkpoint(self):
        sweep = "retry-%d" % time.monotonic_ns()
        # Fails on its first run, after saving a checkpoint that counts runs.
        script = ('n=$(cat "$GPUQ_CHECKPOINT_DIR/n" 2>/dev/null || echo 0); n=$((n+1)); '
                  'echo $n > "$GPUQ_CHECKPOINT_DIR/n"; gpuq checkpoint save >/dev/null; test $n -ge 2')
        job = client.submit(name="retried", command=["sh", "-c", script], retries={"max_errors": 0},
                            labels={"sweep": sweep})
        self.assertEqual(client.wait(job.id, timeout=60, progress=False).state, "failed")
        again = client.retry(job.id)
        self.assertEqual((again.id, again.errors), (job.id, 0))
        self.assertIn(again.state, ("placed", "running", "succeeded"))  # an idle worker may have taken it already
        done = client.wait(job.id, timeout=60, progress=False)
        self.assertEqual((done.state, done.attempt), ("succeeded", 2))
        trail = list(client.events(job.id))
        self.assertEqual([(e.state, e.superseded) for e in trail if e.state in gpuq.TERMINAL_STATES],
                         [("failed", True), ("succeeded", False)])
        self.assertTrue(trail[-1].ends)
        self.assertEqual(len(client.checkpoints(job.id)), 2)
        with self.assertRaises(gpuq.Conflict):
            client.retry(job.id)
        self.assertEqual(client.retry_label("sweep=" + sweep), [])
        # Fresh: the checkpoint is dropped, so the second run counts 1 again.
        again = client.submit(name="retried-fresh", command=["sh", "-c", script], retries={"max_errors": 0})
        self.assertEqual(client.wait(again.id, timeout=60, progress=False).state, "failed")
        client.retry(again.id, fresh=True)
        self.assertEqual(client.wait(again.id, timeout=60, progress=False).state, "failed")
        self.assertEqual([c.seq for c in client.checkpoints(again.id)], [2])
        nowhere = client.submit(name="nowhere", command=["true"], placement={"residency": "CH"})
        self.assertEqual(client.wait(nowhere.id, timeout=60, progress=False).state, "rejected")
        with self.assertRaises(gpuq.InvalidRequest):
            client.retry(nowhere.id)
        self.assertEqual(client.get(nowhere.id).state, "rejected")

    def test_wait_all_waits_for_every_job_of_a_sweep(self):
        sweep = "wait-%d" % time.monotonic_ns()
        jobs = [client.submit(name="sweep-ok", command=["sh", "-c", "sleep 1"], labels={"sweep": sweep}),
                client.submit(name="sweep-bad", command=["sh", "-c", "exit 3"], labels={"sweep": sweep},
                              retries={"max_errors": 0}),
                client.submit(name="sweep-fine", command=["true"], labels={"sweep": sweep})]
        listed = client.list(label="sweep=" + sweep, since=timedelta(hours=1), limit=10_000)
        self.assertEqual([j.id for j in listed], [j.id for j in reversed(jobs)])
        self.assertEqual(client.list(label="sweep=" + sweep, since=timedelta(0)), [])
        finished = client.wait_all(listed, timeout=120, progress=False)
        self.assertEqual([(j.id, j.state) for j in finished],
                         [(jobs[2].id, "succeeded"), (jobs[1].id, "failed"), (jobs[0].id, "succeeded")])
        self.assertEqual([j.state for j in client.wait_all([j.id for j in jobs], progress=False)],
                         ["succeeded", "failed", "succeeded"])
        long = client.submit(name="sweep-long", command=["sleep", "60"], labels={"sweep": sweep})
        with self.assertRaises(gpuq.WaitTimeout) as caught:
            client.wait_all([jobs[0], long], timeout=1, progress=False)
        self.assertEqual((caught.exception.job_id, caught.exception.timeout), (long.id, 1))
        self.assertIn(caught.exception.state, ("pending", "placed", "running"))
        client.cancel(long.id)

    def test_the_status_of_a_placed_job_says_where_it_stands_in_its_pools_line(self):
        sweep = "line-%d" % time.monotonic_ns()
        spot = {"tier": "spot"}  # gpuq dev's local-cpu-spot pool: one worker with two slots
        jobs = [client.submit(name="line", command=["sleep", "60"], placement=spot, labels={"sweep": sweep})
                for _ in range(4)]
        try:
            deadline = time.monotonic() + 60
            while client.get(jobs[1].id).state != "running" and time.monotonic() < deadline:
                time.sleep(0.1)
            self.assertEqual(client.get(jobs[1].id).state, "running")
            st = client.status(jobs[3].id)
            self.assertEqual(st.job.state, "placed")
            self.assertIsInstance(st.waiting, gpuq.PoolLine)
            self.assertEqual((st.waiting.pool, st.waiting.running, st.waiting.workers, st.waiting.paused),
                             ("local-cpu-spot", 2, 1, 0))
            # The third job waited longer; jobs other tests left may too.
            self.assertGreaterEqual(st.waiting.ahead, 1)
            self.assertEqual(client.status(jobs[2].id).waiting.ahead, st.waiting.ahead - 1)
            self.assertIsNone(client.status(jobs[0].id).waiting)
        finally:
            client.cancel_label("sweep=" + sweep)

    def test_a_sweep_over_the_tokens_rate_limit_slows_down_instead_of_failing(self):
        # gpuq dev's token may make 50 requests a second in bursts of 100: a
        # notebook loop submitting a sweep, then cancelling and waiting for
        # it by its label, goes over that and must slow down, not raise.
        sweep = "rate-%d" % time.monotonic_ns()
        n = 250
        jobs = [client.submit(name="rate-%d" % i, command=["sleep", "300"], labels={"sweep": sweep})
                for i in range(n)]
        self.assertEqual(len({j.id for j in jobs}), n)
        cancelled = client.cancel_label("sweep=" + sweep)
        self.assertEqual(len(cancelled), n)
        finished = client.wait_all(client.list(label="sweep=" + sweep, limit=10_000), timeout=60, progress=False)
        self.assertEqual([j.state for j in finished], ["cancelled"] * n)
        # By their ids, each is asked for: over the rate limit, this lasts
        # seconds, and the count is shown, as plain lines on a pipe.
        shown = io.StringIO()
        with contextlib.redirect_stderr(shown):
            self.assertEqual([j.state for j in client.wait_all([j.id for j in jobs], timeout=120)], ["cancelled"] * n)
        self.assertRegex(shown.getvalue().splitlines()[-1], r"^wait_all: %d of %d finished \(%d cancelled\), \d+s$" % (n, n, n))

    def test_submit_many_submits_a_sweep_in_batches_in_order(self):
        # 600 specs: two requests (500 jobs, then 100), well inside gpuq
        # dev's rate limit (every ten jobs count as one request).
        sweep = "many-%d" % time.monotonic_ns()
        specs = [{"name": "lr-%d" % i, "command": ["true"], "labels": {"sweep": sweep},
                  "idempotency_key": "%s-%d" % (sweep, i)} for i in range(600)]
        jobs = client.submit_many(specs, progress=False)
        self.assertEqual([j.name for j in jobs], ["lr-%d" % i for i in range(600)])
        self.assertEqual(len({j.id for j in jobs}), 600)
        self.assertNotIn("pending", {j.state for j in jobs})
        # Running the cell again names the same jobs.
        self.assertEqual([j.id for j in client.submit_many(specs)], [j.id for j in jobs])
        finished = client.wait_all(jobs, timeout=300, progress=False)
        self.assertEqual({j.state for j in finished}, {"succeeded"})
        # A bad spec in the second request is named by its place in specs;
        # the first request's jobs (already there) stay as they are.
        bad = specs + [{"name": "bad", "command": ["true"], "resources": {"gpu": {"count": 0}}}]
        with self.assertRaises(gpuq.InvalidRequest) as caught:
            client.submit_many(bad)
        self.assertIn("body.jobs[600].resources.gpu.count", caught.exception.fields)
        self.assertEqual(len(client.list(label="sweep=" + sweep, limit=10_000)), 600)
        with self.assertRaises(TypeError):
            client.submit_many([{"command": ["true"]}, "echo hi"])

    def test_a_job_is_taken_where_its_id_is(self):
        # `job = c.submit(...)` then `c.wait(job)`: every method that names
        # one job takes the Job as well as its id.
        job = client.submit(name="by-job", command=["sh", "-c", "echo out; echo 7 > $GPUQ_OUTPUT_DIR/n.txt"])
        self.assertEqual(client.wait(job, timeout=120, progress=False).state, "succeeded")
        self.assertEqual(client.get(job).id, job.id)
        self.assertEqual(client.status(job).job.id, job.id)
        self.assertEqual([e.state for e in client.events(job)][-1], "succeeded")
        self.assertEqual("".join(c.data for c in client.logs(job)), "out\n")
        self.assertEqual(client.checkpoints(job), [])
        with tempfile.TemporaryDirectory() as d:
            res = client.results(job, d, progress=False)
            self.assertEqual([f.path for f in res.files], ["n.txt"])
        with self.assertRaises(gpuq.Conflict):
            client.cancel(job)

    def test_logs_of_one_attempt(self):
        job = client.submit(name="retried", command=["sh", "-c", "echo attempt $GPUQ_ATTEMPT; exit 3"],
                            retries={"max_errors": 1, "delay": "1s"})
        self.assertEqual(client.wait(job.id, timeout=120, progress=False).state, "failed")
        self.assertEqual([(c.attempt, c.data) for c in client.logs(job.id)], [(1, "attempt 1\n"), (2, "attempt 2\n")])
        self.assertEqual([c.data for c in client.logs(job.id, attempt=2)], ["attempt 2\n"])
        self.assertEqual([c.data for c in client.logs(job.id, follow=True, attempt=1)], ["attempt 1\n"])
        with self.assertRaises(ValueError):
            list(client.logs(job.id, attempt=0))
        with self.assertRaisesRegex(ValueError, "has had 2 attempt"):
            list(client.logs(job.id, attempt=3))

    def test_logs_from_the_last_lines(self):
        # A job of hours: where it stands now, and then followed from there.
        job = client.submit(name="tailed", command=["sh", "-c", "for i in 1 2 3 4 5; do echo step $i; done; "
                                                    "echo attempt $GPUQ_ATTEMPT; test $GPUQ_ATTEMPT -ge 2"],
                            retries={"max_errors": 1, "delay": "1s"})
        self.assertEqual(client.wait(job, timeout=120, progress=False).state, "succeeded")
        self.assertEqual("".join(c.data for c in client.logs(job, tail=2)), "step 5\nattempt 2\n")
        self.assertEqual([(c.attempt, c.data) for c in client.logs(job, tail=1, attempt=1)], [(1, "attempt 1\n")])
        self.assertEqual("".join(c.data for c in client.logs(job, tail=3, follow=True)), "step 4\nstep 5\nattempt 2\n")
        self.assertEqual("".join(c.data for c in client.logs(job, tail=1000)), "".join(c.data for c in client.logs(job)))
        for bad in (0, -1, 10001, True, "3"):
            with self.assertRaisesRegex(ValueError, "tail"):
                list(client.logs(job, tail=bad))

    def test_logs_of_a_sweep_followed_whole_and_counted(self):
        # Two runs of a sweep, one on each of gpuq dev's pools so that both
        # run at once: followed together, the second's first line comes
        # before the first's last.
        label = "sweep=logs-%d" % os.getpid()
        runs = [client.submit(name="run-%d" % i, labels={"sweep": label.split("=")[1]}, placement={"tier": tier},
                              command=["sh", "-c", "sleep %s; for i in 1 2 3 4 5; do echo run-%d step $i; sleep 0.6; done; "
                                       "echo %d > $GPUQ_OUTPUT_DIR/result.txt" % (0.3 * i, i, i)])
                for i, tier in enumerate(("spot", "on-demand"))]
        seen = [(c.job, c.data) for c in client.logs_all(label=label, follow=True)]
        want = {run.id: "".join("run-%d step %d\n" % (i, s) for s in range(1, 6)) for i, run in enumerate(runs)}
        self.assertEqual({j: "".join(d for jj, d in seen if jj == j) for j in want}, want)
        self.assertLess(seen.index((runs[1].id, "run-1 step 1\n")), seen.index((runs[0].id, "run-0 step 5\n")), seen)
        waited = client.wait_all(label=label, timeout=60, progress=False)
        self.assertEqual([(j.id, j.state) for j in waited], [(run.id, "succeeded") for run in runs])
        with self.assertRaises(ValueError):
            client.wait_all()
        # Their outputs, each under its job's name; a job that did not
        # succeed has none, and is said so.
        dropped = client.submit(name="dropped", command=["sleep", "60"], labels={"other": "x"})
        client.cancel(dropped)
        out = tempfile.mkdtemp(prefix="sweep-", dir=workdir)
        with self.assertLogs("gpuq", "WARNING") as said:
            got = client.results_all(runs + [dropped.id], dir=out, by_name=True, progress=False)
        self.assertIn(dropped.id, "".join(said.output))
        self.assertEqual(list(got), [run.id for run in runs])
        for i, run in enumerate(runs):
            self.assertEqual(got[run.id].dir, os.path.abspath(os.path.join(out, "run-%d" % i)))
            with open(os.path.join(out, "run-%d" % i, "result.txt")) as f:
                self.assertEqual(f.read(), "%d\n" % i)
        by_id = client.results_all(label=label, dir=out, progress=False)
        self.assertEqual([r.dir for r in by_id.values()], [os.path.abspath(os.path.join(out, run.id)) for run in runs])
        # How far the sweep has come: both runs, both finished.
        counts = client.count(label=label)
        self.assertEqual((counts.total, counts.finished, counts.states["succeeded"], counts.states["running"]), (2, 2, 2, 0))
        self.assertEqual(set(counts.states), {"pending", "waiting", "placed", "running", "succeeded", "failed",
                                              "cancelled", "rejected", "dead"})
        self.assertEqual(client.count(label=label, state="failed").total, 0)
        # One run on each of gpuq dev's pools.
        self.assertEqual(client.count(label=label, pool="local-cpu").total, 1)
        self.assertEqual([j.id for j in client.list(label=label, pool="local-cpu")], [runs[1].id])
        with self.assertRaises(ValueError):
            client.count(label="sweep")
        with self.assertRaises(gpuq.InvalidRequest) as caught:
            client.count(label=label, since="yesterday")
        self.assertIn("query.since", caught.exception.fields)
        # Without follow, each job's output whole, in the order given.
        whole = [(c.job, c.data) for c in client.logs_all([runs[1], runs[0].id])]
        first = [j for j, _ in whole].index(runs[0].id)
        self.assertEqual(whole[:first], [(runs[1].id, d) for _, d in whole[:first]])
        self.assertEqual("".join(d for _, d in whole[:first]), want[runs[1].id])
        self.assertEqual("".join(d for j, d in whole[first:] if j == runs[0].id), want[runs[0].id])
        self.assertEqual(len(whole) - first, len([j for j, _ in whole[first:] if j == runs[0].id]))
        self.assertEqual([(c.job, c.data) for c in client.logs_all(label=label, tail=1)],
                         [(runs[0].id, "run-0 step 5\n"), (runs[1].id, "run-1 step 5\n")])
        with self.assertRaises(gpuq.NotFound):
            list(client.logs_all([runs[0], "01a25209-0000-7000-8000-000000000000"], follow=True))
        for bad in ({}, {"jobs": runs, "label": label}, {"jobs": runs, "at_once": 0}, {"label": "sweep"}):
            with self.assertRaises(ValueError):
                list(client.logs_all(**bad))

    def test_list_and_plan(self):
        job = client.submit(name="listed", command=["true"])
        self.assertIn(job.id, [j.id for j in client.list(limit=500)])
        # gpuq dev's pools are in Germany: none is in Switzerland.
        plan = client.plan(command=["true"], placement={"residency": "CH"})
        self.assertFalse(plan.feasible)
        self.assertTrue(plan.reason)
        self.assertTrue(client.plan(command=["true"]).feasible)
        with self.assertRaises(gpuq.InvalidRequest) as caught:
            client.plan(command=["true"], placement={"residency": "EUU"})
        self.assertIn("EUU", str(caught.exception))

    def test_a_job_runs_in_its_shipped_working_directory(self):
        # A project as a notebook's directory holds it: code, data read
        # relative to the working directory, a link, and gpuq dev's
        # settings, which must stay here.
        proj = tempfile.mkdtemp(prefix="proj-", dir=workdir)
        files = {
            "train.py": ("import os, sys\n"
                         "with open(os.path.join('data', 'input.txt')) as f:\n"
                         "    text = f.read().strip()\n"
                         "print('read', text)\n"
                         "print('via link', open('input-link.txt').read().strip())\n"
                         "print('in workdir', os.path.realpath(os.getcwd()) == os.path.realpath(os.environ['GPUQ_WORKDIR']))\n"
                         "print('listing', sorted(os.listdir('.')))\n"
                         "with open(os.path.join(os.environ['GPUQ_OUTPUT_DIR'], 'out.txt'), 'w') as f:\n"
                         "    f.write(text.upper())\n"),
            "data/input.txt": "shipped data\n",
            ".gpuq/config.yaml": "token: not-to-be-shipped\n",
            "__pycache__/train.cpython-39.pyc": "stale",
        }
        for rel, text in files.items():
            path = os.path.join(proj, *rel.split("/"))
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path, "w") as f:
                f.write(text)
        os.symlink(os.path.join("data", "input.txt"), os.path.join(proj, "input-link.txt"))
        key = "workdir-%d" % time.monotonic_ns()
        job = client.submit(name="shipped", command=["python3", "train.py"], workdir=proj, idempotency_key=key)
        self.assertRegex(job.spec.get("workdir", ""), r"^sha256:[0-9a-f]{64}$", job.raw)
        done = client.wait(job, timeout=120, progress=False)
        logs = "".join(c.data for c in client.logs(job))
        self.assertEqual(done.state, "succeeded", done.reason + "\n" + logs + "\n" + dev_log())
        self.assertIn("read shipped data\n", logs)
        self.assertIn("via link shipped data\n", logs)
        self.assertIn("in workdir True\n", logs)
        self.assertIn("listing ['data', 'input-link.txt', 'train.py']\n", logs)
        with tempfile.TemporaryDirectory() as d:
            res = client.results(job, d, progress=False)
            with open(res.files[0].local_path) as f:
                self.assertEqual(f.read(), "SHIPPED DATA")
        # Packing the same files again names the same job; an edit is
        # another spec under the same key.
        self.assertEqual(client.submit(name="shipped", command=["python3", "train.py"], workdir=proj,
                                       idempotency_key=key).id, job.id)
        with open(os.path.join(proj, "train.py"), "a") as f:
            f.write("# edited\n")
        with self.assertRaises(gpuq.Conflict):
            client.submit(name="shipped", command=["python3", "train.py"], workdir=proj, idempotency_key=key)
        # A sweep uploads it once; each job runs in its own copy.
        jobs = client.submit_many([{"name": "shipped-%d" % i, "command": ["python3", "train.py"], "workdir": proj}
                                   for i in range(2)], progress=False)
        self.assertEqual(len({j.spec["workdir"] for j in jobs}), 1)
        self.assertEqual([j.state for j in client.wait_all(jobs, timeout=120, progress=False)], ["succeeded"] * 2)

    def test_a_secret_reaches_its_job_and_nowhere_else(self):
        # A project's admin stores a token once (gpuq dev's token is an
        # admin's of every project); a job names it and gets it in its
        # environment, and its value shows nowhere else: not in what the
        # API answers, the job's logs or gpuq dev's own log.
        value = "hf_" + os.urandom(16).hex()
        self.addCleanup(forget_secret, "HF_TOKEN")
        stored = client.set_secret("HF_TOKEN", value)
        self.assertEqual((stored.project, stored.name), ("default", "HF_TOKEN"))
        self.assertIsNotNone(stored.set_at)
        self.assertTrue(stored.set_by, stored)
        listed = client.secrets()
        self.assertEqual([s.name for s in listed if s.name == "HF_TOKEN"], ["HF_TOKEN"])
        self.assertEqual([s.name for s in listed], sorted(s.name for s in listed))
        for text in (json.dumps(stored.raw), json.dumps([s.raw for s in listed]), repr(listed)):
            self.assertNotIn(value, text)

        script = 'printf %s "$HF_TOKEN" > "$GPUQ_OUTPUT_DIR/token.txt"; echo "token=$HF_TOKEN"'
        label = "secret-%d" % time.monotonic_ns()
        job = client.submit(name="secret", command=["sh", "-c", script], secrets=["HF_TOKEN"], labels={"test": label})
        self.assertEqual(job.spec.get("secrets"), ["HF_TOKEN"], job.raw)
        done = client.wait(job, timeout=120, progress=False)
        logs = "".join(c.data for c in client.logs(job))
        self.assertEqual(done.state, "succeeded", done.reason + "\n" + logs + "\n" + dev_log())
        self.assertIn("token=***\n", logs)
        self.assertNotIn(value, logs)
        with tempfile.TemporaryDirectory() as d:
            res = client.results(job, d, progress=False)
            with open({f.path: f for f in res.files}["token.txt"].local_path) as f:
                self.assertEqual(f.read(), value)
        got, st = client.get(job), client.status(job)
        self.assertEqual((got.spec.get("secrets"), st.job.spec.get("secrets")), (["HF_TOKEN"], ["HF_TOKEN"]))
        events = list(client.events(job))
        listed_jobs = client.list(label="test=" + label)
        self.assertEqual([j.id for j in listed_jobs], [job.id])
        for doc in (job.raw, done.raw, got.raw, st.raw, [e.raw for e in events], [j.raw for j in listed_jobs]):
            self.assertNotIn(value, json.dumps(doc))
        self.assertNotIn(value, repr(st))

        # A secret not set, or one env sets too, is refused naming it.
        with self.assertRaises(gpuq.InvalidRequest) as caught:
            client.submit(command=["true"], secrets=["NOT_SET_SECRET"])
        self.assertIn("spec.secrets[0]", caught.exception.fields, caught.exception)
        self.assertIn("NOT_SET_SECRET", str(caught.exception))
        with self.assertRaises(gpuq.InvalidRequest) as caught:
            client.submit_many([{"command": ["true"], "secrets": ["HF_TOKEN"]},
                                {"command": ["true"], "secrets": ["NOT_SET_SECRET"]}], progress=False)
        self.assertIn("body.jobs[1].secrets[0]", caught.exception.fields, caught.exception)
        with self.assertRaises(gpuq.InvalidRequest) as caught:
            client.submit(command=["true"], env={"HF_TOKEN": "x"}, secrets=["HF_TOKEN"])
        self.assertIn("spec.secrets[0]", caught.exception.fields, caught.exception)

        client.delete_secret("HF_TOKEN")
        self.assertNotIn("HF_TOKEN", [s.name for s in client.secrets()])
        with self.assertRaises(gpuq.NotFound):
            client.delete_secret("HF_TOKEN")
        with self.assertRaises(gpuq.InvalidRequest) as caught:
            client.submit(command=["true"], secrets=["HF_TOKEN"])
        self.assertIn("spec.secrets[0]", caught.exception.fields, caught.exception)
        with open(os.path.join(workdir, "dev.log"), encoding="utf-8", errors="replace") as f:
            self.assertNotIn(value, f.read(), "gpuq dev logged the secret's value")

    def test_a_jobs_end_is_posted_to_the_webhook_its_secret_holds(self):
        # A receiver on loopback (gpuq dev lets webhooks post there) records
        # each POST: its path, headers and JSON body.
        posts = []

        class Receiver(http.server.BaseHTTPRequestHandler):
            def do_POST(self):
                raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                posts.append((self.path, dict(self.headers), json.loads(raw)))
                self.send_response(200)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args):
                pass

        server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Receiver)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        self.addCleanup(server.server_close)
        self.addCleanup(server.shutdown)
        path = "/hooks/T0/B0/secretpart"
        self.addCleanup(forget_secret, "HOOK")
        client.set_secret("HOOK", "http://127.0.0.1:%d%s" % (server.server_address[1], path))

        # A test post first: the server posts it as it will post an end.
        tested = client.test_webhook("HOOK")
        self.assertEqual((tested.delivered, tested.http_status, tested.host, tested.secret, tested.error),
                         (True, 200, "127.0.0.1", "HOOK", ""), tested)
        self.assertNotIn("secretpart", json.dumps(tested.raw))
        self.assertEqual([(p[0], p[2].get("test")) for p in posts], [(path, True)])
        with self.assertRaises(gpuq.NotFound):
            client.test_webhook("NOT_SET")

        failed = client.submit(name="notified", command=["sh", "-c", "exit 3"], retries={"max_errors": 0},
                               notify={"webhook": "HOOK"})
        quiet = client.submit(name="not-notified", command=["true"], notify={"webhook": "HOOK", "when": ["failed"]})
        self.assertEqual(failed.spec.get("notify"), {"webhook": "HOOK"}, failed.raw)
        self.assertEqual(quiet.spec.get("notify"), {"webhook": "HOOK", "when": ["failed"]}, quiet.raw)
        self.assertEqual([client.wait(j, timeout=120, progress=False).state for j in (failed, quiet)],
                         ["failed", "succeeded"])
        deadline = time.monotonic() + 30
        while True:
            note = client.status(failed).notification
            if note is not None and note.outcome == "delivered":
                break
            self.assertLess(time.monotonic(), deadline, "not delivered in time: %r\n%s" % (note, dev_log()))
            time.sleep(0.2)
        self.assertEqual((note.state, note.tries, note.http_status), ("failed", 1, 200), note)
        # Its one attempt ran on a priced pool: what it cost, in the status
        # and in the post.
        spent = client.status(failed).spent
        self.assertEqual(len(spent), 1, spent)
        self.assertRegex(spent[0], r"^\d+\.\d{2,6} EUR$")
        self.assertIsNotNone(note.ended_at)
        # The succeeded one's end is not among those its spec wants posted.
        time.sleep(2)
        self.assertIsNone(client.status(quiet).notification)
        self.assertEqual([p for p in posts if p[2].get("job", {}).get("id") == quiet.id], [])
        mine = [p for p in posts if p[2].get("job", {}).get("id") == failed.id]
        self.assertEqual(len(mine), 1, posts)
        got_path, headers, body = mine[0]
        self.assertEqual(got_path, path)
        self.assertEqual((body["job"]["id"], body["job"]["state"], body["job"]["exit_code"]), (failed.id, "failed", 3))
        self.assertEqual(body["job"]["spent"], spent)
        self.assertTrue(body["text"].startswith("gpuq: job"), body["text"])
        headers = {k.lower(): v for k, v in headers.items()}
        self.assertEqual(headers.get("content-type"), "application/json")
        self.assertTrue(headers.get("x-gpuq-delivery", "").startswith(failed.id + "/"), headers)

        with self.assertRaises(gpuq.InvalidRequest) as caught:
            client.submit(command=["true"], notify={"webhook": "NOT_SET"})
        self.assertIn("spec.notify.webhook", caught.exception.fields, caught.exception)
        # A job kept in a residency posts none of its output.
        with self.assertRaises(gpuq.InvalidRequest) as caught:
            client.submit(command=["true"], placement={"residency": "EU"}, notify={"webhook": "HOOK", "log_lines": 5})
        self.assertIn("spec.notify.log_lines", caught.exception.fields, caught.exception)

    def test_a_workdir_not_uploaded_is_refused_naming_the_field(self):
        with self.assertRaises(gpuq.InvalidRequest) as caught:
            client.submit(command=["true"], workdir="sha256:" + "0" * 64)
        self.assertIn("spec.workdir", caught.exception.fields, caught.exception)
        with self.assertRaises(gpuq.InvalidRequest) as caught:
            client.submit(command=["true"], workdir="sha256:not-hex")
        self.assertIn("spec.workdir", caught.exception.fields, caught.exception)
        # A plan packs a directory for its digest but uploads nothing.
        proj = tempfile.mkdtemp(prefix="planned-", dir=workdir)
        with open(os.path.join(proj, "unique.txt"), "w") as f:
            f.write("planned %d\n" % time.monotonic_ns())
        self.assertTrue(client.plan(command=["true"], workdir=proj).feasible)
        with gpuq.workdir.packed(proj) as archive:
            digest = archive.digest
        with self.assertRaises(gpuq.InvalidRequest) as caught:
            client.submit(command=["true"], workdir=digest)
        self.assertIn("spec.workdir", caught.exception.fields, caught.exception)
        self.assertEqual(client.upload_workdir(proj), digest)
        self.assertEqual(client.submit(command=["true"], workdir=digest).spec["workdir"], digest)

    def test_offers_are_gpuq_devs_two_german_cpu_pools(self):
        offers = {o.pool: o for o in client.offers()}
        self.assertEqual(sorted(offers), ["local-cpu", "local-cpu-spot"])
        spot, od = offers["local-cpu-spot"], offers["local-cpu"]
        self.assertEqual((spot.tier, spot.price_micros, spot.currency, spot.country), ("spot", 30000, "EUR", "DE"))
        self.assertEqual((od.tier, od.price_micros, od.card, od.gpu_count), ("on-demand", 100000, "cpu", 0))

    def test_spend_shows_a_finished_jobs_estimate_released(self):
        job = client.submit(name="charged", command=["true"], expected_duration="30m")
        job = client.wait(job.id, timeout=120, progress=False)
        self.assertEqual(job.state, "succeeded")
        spend = client.spend("default", since=datetime.now(timezone.utc) - timedelta(hours=1))
        self.assertEqual(spend.project, "default")
        lines = [j for j in spend.jobs if j.job_id == job.id]
        # gpuq dev's spot pool costs 0.03 EUR/h: half an hour is at least
        # 15,000 micros estimated (more for the restarts spot may cost), all
        # of it released once the job finished.
        self.assertEqual([(j.currency, j.reserved_micros) for j in lines], [("EUR", 0)], lines)
        self.assertTrue(15000 <= lines[0].estimated_micros < 30000, lines)
        self.assertIn("EUR", [a.currency for a in spend.amounts])
        empty = client.spend("nothing-here")
        self.assertEqual((empty.amounts, empty.jobs), ([], []))
        with self.assertRaises(gpuq.InvalidRequest) as caught:
            client.spend("default", since="last week")
        self.assertIn("query.since", caught.exception.fields)

    def test_a_job_no_offer_fits_comes_back_rejected_with_the_reasons(self):
        # gpuq dev's pools are in Germany: none is in Switzerland.
        job = client.submit(name="swiss", command=["true"], placement={"residency": "CH"})
        self.assertEqual(job.state, "rejected")
        self.assertIn("outside residency CH", job.reason)
        self.assertEqual(client.get(job).state, "rejected")

    def test_a_job_runs_after_the_jobs_it_names(self):
        prep = client.submit(name="prep", command=["sh", "-c", "sleep 2"])
        train = client.submit(name="train", command=["true"], after=[prep])
        self.assertEqual(train.state, "waiting")
        self.assertEqual(train.spec["after"], [prep.id])
        self.assertEqual(client.wait(train.id, timeout=120, progress=False).state, "succeeded")
        self.assertEqual(client.get(prep.id).state, "succeeded")
        after = client.status(train.id).after
        self.assertEqual([(d.job_id, d.name, d.state) for d in after], [(prep.id, "prep", "succeeded")])
        self.assertEqual(client.status(prep.id).after, [])
        # One it runs after fails: it is cancelled, saying which and what to do.
        prep2 = client.submit(name="prep2", command=["sh", "-c", "sleep 2; exit 3"], retries={"max_errors": 0})
        train2 = client.submit(name="train2", command=["true"], after=[prep2.id])
        done = client.wait(train2.id, timeout=120, progress=False)
        self.assertEqual(done.state, "cancelled")
        self.assertIn(prep2.id, done.reason)
        self.assertEqual(client.get(prep2.id).state, "failed")
        with self.assertRaises(gpuq.InvalidRequest):
            client.retry(train2.id)
        with self.assertRaises(gpuq.InvalidRequest) as caught:
            client.submit(command=["true"], after=["00000000-0000-0000-0000-000000000000"])
        self.assertIn("spec.after[0]", caught.exception.fields, caught.exception)

    def test_a_job_runs_after_the_jobs_it_names_have_ended_however_they_ended(self):
        run = client.submit(name="run", command=["sh", "-c", "sleep 2; exit 3"], retries={"max_errors": 0})
        summary = client.submit(name="summary", command=["true"], after_ended=[run])
        self.assertEqual(summary.state, "waiting")
        self.assertEqual(summary.spec["after_ended"], [run.id])
        # The run fails: the summary is not cancelled but runs once it has.
        self.assertEqual(client.wait(summary.id, timeout=120, progress=False).state, "succeeded")
        self.assertEqual(client.get(run.id).state, "failed")
        st = client.status(summary.id)
        self.assertEqual([(d.job_id, d.name, d.state) for d in st.after_ended], [(run.id, "run", "failed")])
        self.assertEqual(st.after, [])
        self.assertIn("waiting for job %s (run) to end" % run.id, "\n".join(h.message for h in st.history))
        self.assertEqual(client.status(run.id).after_ended, [])
        with self.assertRaises(gpuq.InvalidRequest) as caught:
            client.submit(command=["true"], after=[run], after_ended=[run])
        self.assertIn("spec.after_ended[0]", caught.exception.fields, caught.exception)

    def test_submit_many_submits_a_pipeline_naming_earlier_specs_by_name(self):
        specs = [{"name": "prep", "command": ["sh", "-c", "echo prepared"]},
                 {"name": "train", "command": ["sh", "-c", "echo trained 1"], "after": ["prep"]},
                 {"name": "train", "command": ["sh", "-c", "echo trained 2"], "after": ["prep"]},
                 {"name": "summary", "command": ["sh", "-c", "echo summarized"], "after_ended": ["train"]}]
        prep, train1, train2, summary = client.submit_many(specs, progress=False)
        self.assertEqual([j.name for j in (prep, train1, train2, summary)], ["prep", "train", "train", "summary"])
        self.assertEqual([train1.spec["after"], train2.spec["after"]], [[prep.id], [prep.id]])
        self.assertEqual(summary.spec["after_ended"], [train1.id, train2.id])
        self.assertEqual([client.wait(j, timeout=120, progress=False).state for j in (prep, train1, train2, summary)],
                         ["succeeded"] * 4)
        self.assertEqual([d.job_id for d in client.status(summary).after_ended], [train1.id, train2.id])
        for train in (train1, train2):
            self.assertEqual([(d.job_id, d.name) for d in client.status(train).after], [(prep.id, "prep")])
        self.assertEqual(specs[3]["after_ended"], ["train"])

    def test_a_job_reads_the_outputs_of_the_jobs_it_names_in_inputs(self):
        specs = [{"name": "prep", "command": ["sh", "-c", "echo 42 > $GPUQ_OUTPUT_DIR/data.txt"]},
                 {"name": "train", "inputs": [{"job": "prep"}],
                  "command": ["sh", "-c", "cat $GPUQ_INPUT_DIR/prep/data.txt > $GPUQ_OUTPUT_DIR/copy.txt"]}]
        prep, train = client.submit_many(specs, progress=False)
        self.assertEqual(train.spec["inputs"], [{"name": "prep", "job": prep.id}])
        # The job it reads is added to the jobs it runs after.
        self.assertEqual(client.wait(train, timeout=120, progress=False).state, "succeeded")
        self.assertEqual([d.job_id for d in client.status(train).after], [prep.id])
        with tempfile.TemporaryDirectory() as d:
            res = client.results(train, d, progress=False)
            self.assertEqual([f.path for f in res.files], ["copy.txt"])
            with open(res.files[0].local_path) as f:
                self.assertEqual(f.read().strip(), "42")
        # submit takes the Job, under a name of its own.
        job = client.submit(command=["sh", "-c", "cat $GPUQ_INPUT_DIR/p/data.txt > $GPUQ_OUTPUT_DIR/copy.txt"],
                            inputs=[{"name": "p", "job": prep}])
        self.assertEqual(job.spec["inputs"], [{"name": "p", "job": prep.id}])
        self.assertEqual(client.wait(job, timeout=120, progress=False).state, "succeeded")
        with tempfile.TemporaryDirectory() as d:
            client.results(job, d, progress=False)
            with open(os.path.join(d, "copy.txt")) as f:
                self.assertEqual(f.read().strip(), "42")
        self.assertEqual(specs[1]["inputs"], [{"job": "prep"}])
        with self.assertRaises(gpuq.InvalidRequest) as caught:
            client.submit(command=["true"], inputs=[{"job": "00000000-0000-0000-0000-000000000000"}])
        self.assertIn("spec.inputs[0].job", caught.exception.fields, caught.exception)

    def test_retry_downstream_runs_a_failed_pipeline_again_whole(self):
        # prep fails on its first attempt and succeeds when retried.
        prep = client.submit(name="prep", command=["sh", "-c", 'test "$GPUQ_ATTEMPT" -ge 2'],
                             retries={"max_errors": 0})
        train = client.submit(name="train", command=["true"], after=[prep])
        evaluate = client.submit(name="eval", command=["true"], after=[train])
        self.assertEqual(client.wait(evaluate, timeout=120, progress=False).state, "cancelled")
        self.assertEqual(client.get(prep).state, "failed")
        self.assertEqual([j.id for j in client.list(runs_after=prep)], [train.id])
        self.assertEqual([j.id for j in client.list(runs_after=train.id)], [evaluate.id])
        self.assertEqual([(d.job_id, d.state) for d in client.status(prep).dependents], [(train.id, "cancelled")])
        retried = client.retry_downstream(prep)
        self.assertEqual([j.id for j in retried], [prep.id, train.id, evaluate.id])
        self.assertEqual([client.wait(j, timeout=120, progress=False).state for j in retried], ["succeeded"] * 3)
        # Nothing is left to retry: prep, which succeeded, is not run again.
        self.assertEqual(client.retry_downstream(prep), [])
        # A job that has not finished raises.
        running = client.submit(name="running", command=["sleep", "30"])
        with self.assertRaises(gpuq.Conflict):
            client.retry_downstream(running)
        client.cancel(running)

    def test_cancel_downstream_abandons_a_pipeline_whole(self):
        # report runs once gather has ended however it ended: cancelled
        # with the rest, it must not be released to run in between.
        fetch = client.submit(name="fetch", command=["sleep", "60"])
        gather = client.submit(name="gather", command=["true"], after=[fetch])
        report = client.submit(name="report", command=["true"], after_ended=[gather])
        cancelled = client.cancel_downstream(fetch)
        self.assertEqual([(j.id, j.state) for j in cancelled],
                         [(report.id, "cancelled"), (gather.id, "cancelled"), (fetch.id, "cancelled")])
        self.assertEqual(client.status(report).attempts, [])

    def test_spend_lists_what_is_left_of_each_budget(self):
        # A team's admin sets the project's budget (gpuq dev's token is an
        # admin's of every project); a job of the project runs under it.
        client._call("PUT", "/v1/projects/budgeted/budgets", body={"budgets": [{"cap": "2 EUR", "period": "month"}]})
        job = client.submit(project="budgeted", command=["true"], expected_duration="30m")
        self.assertEqual(client.wait(job, timeout=120, progress=False).state, "succeeded")
        spend = client.spend("budgeted")
        self.assertEqual(len(spend.budgets), 1, spend.budgets)
        b = spend.budgets[0]
        now = datetime.now(timezone.utc)
        self.assertEqual((b.budget, b.cap, b.period, b.reserved), ("budgeted", "2.00 EUR", "month", "0.00 EUR"))
        self.assertEqual(b.period_start, datetime(now.year, now.month, 1, tzinfo=timezone.utc))
        spent, remaining = (float(v.split()[0]) for v in (b.spent, b.remaining))
        self.assertAlmostEqual(spent + remaining, 2.0, places=6)
        self.assertTrue(remaining > 1.99, b)
        self.assertEqual(client.spend("default").budgets, [])


if __name__ == "__main__":
    unittest.main()


class RestartTest(unittest.TestCase):
    def test_wait_and_followed_logs_outlive_a_restart_of_gpuq_dev(self):
        global dev
        job = client.submit(name="across-restart", command=["sh", "-c", "echo before; sleep 3; echo after"])
        got = {}

        def wait():
            try:
                got["job"] = client.wait(job.id, timeout=180, progress=False)
            except Exception as e:  # noqa: BLE001 - reported by the test
                got["wait"] = e

        def follow():
            try:
                got["logs"] = "".join(c.data for c in client.logs(job.id, follow=True))
            except Exception as e:  # noqa: BLE001 - reported by the test
                got["follow"] = e

        def events():
            try:
                got["states"] = [e.state for e in client.events(job.id)]
            except Exception as e:  # noqa: BLE001 - reported by the test
                got["events"] = e

        threads = [threading.Thread(target=f) for f in (wait, follow, events)]
        for t in threads:
            t.start()
        deadline = time.monotonic() + 60
        while client.get(job.id).state != "running":
            self.assertLess(time.monotonic(), deadline, "the job did not start:\n" + dev_log())
            time.sleep(0.1)
        # Ctrl-C, as a terminal sends it: the job is handed back, dev stops.
        os.killpg(dev.pid, signal.SIGINT)
        self.assertEqual(dev.wait(60), 0, dev_log())
        dev.stdout.close()
        # The same address as before: were 8080 taken, a new dev would
        # pick another free port, which no client started earlier knows.
        dev = start_dev("--http-addr", urllib.parse.urlparse(client.url).netloc)
        for t in threads:
            t.join(180)
        for broken in ("wait", "follow", "events"):
            self.assertNotIn(broken, got)
        self.assertEqual(got["job"].state, "succeeded", got["job"].reason)
        st = client.status(job.id)
        self.assertEqual([a.outcome for a in st.attempts], ["shutdown", "succeeded"],
                         "\n".join("%s %s %s" % (h.state, h.attempt, h.message) for h in st.history) + "\n" + dev_log())
        self.assertIn("after\n", got["logs"])
        # Each event once, none missed: the reopened stream resumed after
        # the last event it had.
        self.assertEqual(got["states"], [h.state for h in st.history])
