"""The HTTP API client."""

from __future__ import annotations

import http.client
import json
import logging
import os
import posixpath
import queue
import re
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
import uuid
from datetime import datetime, timedelta, timezone
from typing import IO, Any, Callable, Dict, Iterable, Iterator, List, Mapping, Optional, Sequence, Tuple, Union

from .errors import APIError, Conflict, ErrorDetail, GpuqError, RateLimited, Unreachable, WaitTimeout, api_error
from .progress import Progress, Sweep, Transfer
from .types import (TERMINAL_STATES, Checkpoint, Event, Job, JobCounts, JobStatus, LogChunk, Offer, Plan, Results, Secret,
                    Spend, WebhookTest)
from .workdir import DIGEST_PREFIX, Packed, packed

#: Where `gpuq dev` writes its settings, relative to the directory it runs in.
DEV_CONFIG = os.path.join(".gpuq", "config.yaml")
DEV_TOKEN = os.path.join(".gpuq", "token")

#: A job as the methods take it: its id, or the :class:`Job` itself.
JobRef = Union[str, Job]

#: The states a job is retried from, and those it is cancelled in.
_RETRYABLE = ("failed", "dead", "cancelled", "rejected")
_UNFINISHED = ("pending", "waiting", "placed", "running")

_MAX_DOC = 64 << 20
_MAX_LINE = 4 << 20


class Client:
    """A client of one gpuq HTTP API with one token.

    >>> c = Client("http://127.0.0.1:8080", token)     # doctest: +SKIP
    >>> job = c.submit(command=["echo", "hi"])          # doctest: +SKIP
    """

    def __init__(self, url: str, token: str, timeout: float = 60.0) -> None:
        parsed = urllib.parse.urlparse(url or "")
        if parsed.scheme not in ("http", "https") or not parsed.netloc:
            raise GpuqError("url: want the API's base URL such as http://127.0.0.1:8080, got %r" % (url,))
        if not token:
            raise GpuqError("token: not set; pass one, set GPUQ_TOKEN, or run `gpuq dev` (it writes %s)" % DEV_CONFIG)
        self.url = url.rstrip("/")
        self._token = token.strip()
        self.timeout = timeout

    def __repr__(self) -> str:
        return "Client(%r)" % self.url

    @classmethod
    def from_env(cls, config: Optional[str] = None, timeout: float = 60.0) -> "Client":
        """A client from GPUQ_URL and GPUQ_TOKEN, else from a config file:
        ``config``, GPUQ_CONFIG, or the ``.gpuq/config.yaml`` that `gpuq dev`
        writes, looked for in the current directory and its parents."""
        url, token = os.environ.get("GPUQ_URL", ""), os.environ.get("GPUQ_TOKEN", "")
        path = config or os.environ.get("GPUQ_CONFIG") or _find_dev_config()
        if path and (not url or not token):
            settings = _read_config(path)
            url = url or settings.get("url", "")
            token = token or settings.get("token", "")
            if not token:
                token_file = os.path.join(os.path.dirname(path), "token")
                if os.path.exists(token_file):
                    with open(token_file, encoding="utf-8") as f:
                        token = f.read().strip()
        if not url:
            raise GpuqError("no gpuq API configured: set GPUQ_URL and GPUQ_TOKEN, or run `gpuq dev` here (it writes %s)" % DEV_CONFIG)
        return cls(url, token, timeout=timeout)

    # --- transport -------------------------------------------------------

    def _open(self, method: str, path: str, query: Optional[Mapping[str, Any]] = None, body: Any = None,
              accept: str = "application/json", headers: Optional[Mapping[str, str]] = None,
              timeout: Optional[float] = None):
        """Sends a request and returns the response. ``body`` is a JSON
        document, or a :class:`_FileBody` sent from its file. A 429 is sent
        again after its Retry-After: the rate limiter refuses a request
        before anything acts on it, so that a loop submitting a sweep slows
        down to the token's rate instead of failing halfway."""
        limited = 0.0  # seconds waited for the rate limit so far
        while True:
            try:
                return self._open_once(method, path, query, body, accept, headers, timeout)
            except RateLimited as e:
                if limited >= _RATE_LIMIT_RETRY:
                    raise
                pause = min(max(1.0 if e.retry_after is None else e.retry_after, 0.1), 60.0, _RATE_LIMIT_RETRY - limited)
                limited += pause
                time.sleep(pause)

    def _open_once(self, method: str, path: str, query: Optional[Mapping[str, Any]], body: Any,
                   accept: str, headers: Optional[Mapping[str, str]], timeout: Optional[float]):
        url = self.url + path
        params = {k: v for k, v in (query or {}).items() if v is not None}
        if params:
            url += "?" + urllib.parse.urlencode(params)
        data: Any = None
        stream = None
        req_headers = {"Authorization": "Bearer " + self._token, "Accept": accept}
        if isinstance(body, _FileBody):
            data = stream = body.open()
            req_headers["Content-Type"] = body.content_type
            req_headers["Content-Length"] = str(body.size)
        elif body is not None:
            data = json.dumps(body).encode("utf-8")
            req_headers["Content-Type"] = "application/json"
        req_headers.update(headers or {})
        req = urllib.request.Request(url, data=data, method=method, headers=req_headers)
        try:
            return urllib.request.urlopen(req, timeout=timeout if timeout is not None else self.timeout)
        except urllib.error.HTTPError as e:
            raw = e.read(1 << 20)
            try:
                doc = json.loads(raw.decode("utf-8"))
            except ValueError:
                doc = raw.decode("utf-8", "replace").strip() or e.reason
            retry = e.headers.get("Retry-After") if e.headers else None
            raise api_error(e.code, doc, float(retry) if retry and retry.isdigit() else None) from None
        except urllib.error.URLError as e:
            raise Unreachable("%s %s: %s" % (method, url, e.reason)) from e
        except (OSError, http.client.HTTPException) as e:
            # The connection dropped before an answer came (a server
            # stopping), which urllib does not wrap.
            raise Unreachable("%s %s: %r" % (method, url, e)) from e
        finally:
            if stream is not None:
                stream.close()

    def _call(self, method: str, path: str, query: Optional[Mapping[str, Any]] = None, body: Any = None,
              retry_for: float = 0.0, idempotent: bool = False, masked: str = "") -> Any:
        """Sends a request and returns its JSON answer, None for an empty
        one (204). A GET, or a request marked ``idempotent``, answered 502,
        503 or 504 (a server restarting, a proxy without its backend) is
        asked again for up to ``retry_for`` seconds, with one warning; other
        requests are not, since the server may have acted on them.
        ``masked`` is a secret the body holds: an error answer that echoes
        it is raised and logged with ``***`` in its place."""
        since: Optional[float] = None
        pause = _RETRY_FIRST
        while True:
            try:
                with self._open(method, path, query, body) as resp:
                    try:
                        raw = resp.read(_MAX_DOC)
                    except (OSError, http.client.HTTPException) as e:
                        raise Unreachable("%s %s: the answer broke off: %r" % (method, self.url + path, e)) from e
                return json.loads(raw.decode("utf-8")) if raw else None
            except APIError as e:
                if masked:
                    _mask(e, masked)
                if not (method == "GET" or idempotent) or e.status not in (502, 503, 504):
                    raise
                now = time.monotonic()
                if since is None:
                    since = now
                    if retry_for > 0:
                        _log.warning("%s %s: %s; trying again for up to %g s", method, path, e, retry_for)
                if now - since + pause > retry_for:
                    raise
                time.sleep(pause)
                pause = min(pause * 2, _RETRY_MAX)

    def _get(self, path: str, query: Optional[Mapping[str, Any]] = None) -> Any:
        """A GET of a document, asked again while the server is briefly
        unavailable."""
        return self._call("GET", path, query, retry_for=_UNAVAILABLE_RETRY)

    def _events(self, path: str, query: Optional[Mapping[str, Any]] = None, last_id: Optional[str] = None,
                read_timeout: Optional[float] = None) -> Iterator[Tuple[str, str, Any]]:
        """Yields (id, event, data) of a Server-Sent Events stream."""
        headers = {"Last-Event-ID": last_id} if last_id else None
        with self._open("GET", path, query, accept="text/event-stream", headers=headers, timeout=read_timeout) as resp:
            ev_id, ev_type, data = "", "", []
            while True:
                line = resp.readline(_MAX_LINE)
                if not line:
                    return
                text = line.decode("utf-8").rstrip("\r\n")
                if text == "":
                    if ev_type or data:
                        yield ev_id, ev_type, json.loads("\n".join(data)) if data else None
                    ev_id, ev_type, data = "", "", []
                    continue
                name, _, value = text.partition(":")
                value = value[1:] if value.startswith(" ") else value
                if name == "id":
                    ev_id = value
                elif name == "event":
                    ev_type = value
                elif name == "data":
                    data.append(value)

    # --- jobs ------------------------------------------------------------

    def submit(self, spec: Optional[Mapping[str, Any]] = None, *, idempotency_key: Optional[str] = None,
               **fields: Any) -> Job:
        """Submits a job spec (README "Job spec"), given as a dict or as
        keyword fields (``command=[...]``, ``name=...``, ``resources={...}``),
        and returns the job once the scheduler placed or rejected it: a job
        no offer fits comes back with ``state == "rejected"`` and the
        reasons in ``reason``. With an idempotency key, submitting again (a re-run notebook cell)
        returns the same job; the same key with another spec raises
        :class:`Conflict`. An invalid spec raises :class:`InvalidRequest`
        naming each field at fault. A submission with an idempotency key is
        sent again while the server answers 502, 503 or 504 (it names the
        same job however often it arrives); one without is not.

        ``workdir`` ships a local directory with the job: it is packed and
        uploaded (:meth:`upload_workdir`) for the spec's project, and the
        spec names it by its digest; the command runs in the unpacked copy
        (``GPUQ_WORKDIR``). A value that starts with ``sha256:`` names a
        directory uploaded before and is sent as it is. Editing a file
        changes the digest, and so the spec: the same idempotency key then
        raises :class:`Conflict`.

        ``secrets`` names project secrets (:meth:`set_secret`) that the job
        gets as environment variables of those names: the spec holds only
        the names. A name not set for the spec's project, or one ``env``
        sets too, raises :class:`InvalidRequest` (``spec.secrets[0]``).

        ``notify`` posts the job's end as JSON to a webhook whose URL a
        project secret holds (``notify={"webhook": "SLACK_HOOK", "when":
        ["failed", "dead"]}``; ``when`` left out posts every end); the job
        does not get that secret, and :meth:`status`'s ``notification``
        says how the post went. A webhook secret not set for the spec's
        project raises :class:`InvalidRequest` (``spec.notify.webhook``).

        ``after`` lists jobs of the same project, submitted before, that
        must all succeed first, as ids or :class:`Job` objects
        (``after=[prep]``): the job comes back ``"waiting"``, is placed once
        they have succeeded, and is cancelled, with the reason, if one of
        them ends otherwise. An id that is not a job of the project raises
        :class:`InvalidRequest` (``spec.after[0]``).

        ``after_ended`` lists jobs, as ``after`` does, that must each have
        ended, however it ended (succeeded, failed, died, was cancelled or
        was rejected), before the job is placed: a summary of a sweep some
        of whose runs may fail (``c.submit(command=[...],
        after_ended=sweep_jobs)``). The job comes back ``"waiting"`` while
        one of them has not ended, and is never cancelled because one of
        them failed. A job named in both lists raises
        :class:`InvalidRequest` (``spec.after_ended[0]``).

        An entry of ``inputs`` may hold, instead of data, the outputs of an
        earlier job: ``{"name": "prep", "job": prep}`` (an id or a
        :class:`Job`; ``name`` defaults to the job id) unpacks that job's
        ``$GPUQ_OUTPUT_DIR`` in ``$GPUQ_INPUT_DIR/prep`` before the command
        runs. The job must be of the same project and submitted before; it
        is added to ``after`` unless ``after`` or ``after_ended`` names it
        (one of ``after_ended`` that did not succeed gives no directory),
        and the job runs inside the data residency of each job it reads.
        ``name`` is a directory name (1-128 letters, digits, ``.``, ``_``,
        ``-``, starting with a letter or digit), unique among the job
        inputs. An entry that is not a dict, or a ``job`` neither a str nor
        a Job, raises TypeError (``inputs[0].job``); one the server refuses
        :class:`InvalidRequest` (``spec.inputs[0].job``)."""
        doc = _spec(spec, fields)
        _warn_credential_env([doc])
        self._ship_workdir(doc)
        if idempotency_key is not None:
            doc["idempotency_key"] = idempotency_key
        keyed = bool(doc.get("idempotency_key"))
        return Job.from_doc(self._call("POST", "/v1/jobs", body=doc, retry_for=_UNAVAILABLE_RETRY if keyed else 0.0,
                                       idempotent=keyed))

    def submit_many(self, specs: Iterable[Mapping[str, Any]], progress: bool = True) -> List[Job]:
        """Submits a sweep: each spec a dict as :meth:`submit` takes it,
        500 to a request (``POST /v1/jobs/batch``), and returns the jobs in
        the specs' order once the scheduler placed or rejected each. A
        request is checked as a whole before any of its jobs is submitted:
        an invalid spec raises :class:`InvalidRequest` naming it by its
        place in ``specs`` (``body.jobs[7].resources.gpu.count``), a key
        already used with another spec :class:`Conflict`. The requests
        before the one refused stay submitted; with an ``idempotency_key``
        on every spec, calling again once it is fixed submits only the
        rest, and a request is sent again while the server answers 502,
        503 or 504. Every ten jobs count as one request against the
        token's rate limit. Once it lasts over a second it shows how many
        jobs are submitted (Jupyter, terminal or plain lines on stderr;
        ``progress=False`` hides it). A spec's ``workdir`` is shipped as
        :meth:`submit` ships it, each directory once per project, before
        the first request, and its ``after``, ``after_ended`` and the
        ``job`` of its ``inputs`` may hold :class:`Job` objects as
        :meth:`submit`'s do.

        A spec's ``after`` and ``after_ended`` may also name specs earlier
        in ``specs`` by their ``name``: an element that is a str but not a
        job id stands for every earlier spec of that name (a sweep's runs
        may share one), and the job runs after each of their jobs::

            c.submit_many([{"name": "prep", "command": [...]},
                           {"name": "train", "command": [...], "after": ["prep"]},
                           {"name": "train", "command": [...], "after": ["prep"]},
                           {"name": "summary", "command": [...], "after_ended": ["train"]}])

        The specs are then sent in order, a request ending before the first
        spec that names one of the same request, so that the ids of the
        jobs named are known (the requests above: prep; the two train runs;
        summary). A name of no spec before it, or one naming a spec the
        spec names already, raises ValueError (``specs[3].after_ended[0]``)
        before any request.

        The ``job`` of an entry of ``inputs`` may name earlier specs too:
        ``{"job": "prep"}`` reads the outputs of prep's job in
        ``$GPUQ_INPUT_DIR/prep`` (the entry's ``name`` defaults to the name
        it gives), and a name of k > 1 specs becomes k entries, in order,
        named ``<name>-1`` to ``<name>-k`` after the entry's ``name`` or
        else the name it gives (``train-1``, ``train-2``). A spec so
        named splits the requests as one named in ``after`` does, and may
        be named in ``after`` as well. A name of no spec before it raises
        ValueError (``specs[3].inputs[0].job``) before any request."""
        docs = []
        # named[i]: the earlier specs spec i names by name; by_name: the
        # specs read so far under each name.
        named: List[List[int]] = []
        by_name: Dict[str, List[int]] = {}
        for i, spec in enumerate(specs):
            if not isinstance(spec, Mapping):
                raise TypeError("specs[%d]: want a dict (the job spec), got %s" % (i, type(spec).__name__))
            doc = dict(spec)
            _after_ids(doc, "specs[%d]." % i)
            _input_ids(doc, "specs[%d]." % i)
            named.append(_after_names(doc, "specs[%d]." % i, by_name)
                         + _input_names(doc, "specs[%d]." % i, by_name))
            name = doc.get("name")
            if isinstance(name, str) and name:
                by_name.setdefault(name, []).append(i)
            docs.append(doc)
        _warn_credential_env(docs)
        shipped: Dict[Tuple[str, Optional[str]], str] = {}
        for doc in docs:
            self._ship_workdir(doc, progress=progress, shipped=shipped)
        jobs: List[Job] = []
        shown = Transfer("submit_many: jobs submitted", len(docs), count="{:,}".format) if progress else None
        try:
            start = 0
            while start < len(docs):
                end = _request_end(named, start)
                chunk = [_filled(docs[i], jobs) if named[i] else docs[i] for i in range(start, end)]
                keyed = all(d.get("idempotency_key") for d in chunk)
                try:
                    answer = self._call("POST", "/v1/jobs/batch", body={"jobs": chunk},
                                        retry_for=_UNAVAILABLE_RETRY if keyed else 0.0, idempotent=keyed)
                except APIError as e:
                    raise _shifted(e, start) from None
                jobs.extend(Job.from_doc(item["job"]) for item in answer.get("jobs") or [])
                if shown is not None:
                    shown.add(len(chunk))
                start = end
        finally:
            if shown is not None:
                shown.close()
        return jobs

    def get(self, job_id: JobRef) -> Job:
        """The job as recorded now."""
        job_id = _id(job_id)
        return Job.from_doc(self._get(_job_path(job_id)))

    def _job_now(self, job_id: str, retry_for: float = 0.0) -> Job:
        """The job, asked once (a loop that reconnects by itself), or again
        for up to ``retry_for`` seconds while the server is unavailable."""
        return Job.from_doc(self._call("GET", _job_path(job_id), retry_for=retry_for))

    def status(self, job_id: JobRef) -> JobStatus:
        """The job with its attempts, latest checkpoint, placement and
        history; a failed job carries its last log lines, and a job whose
        spec has ``notify`` the delivery of its latest end to the webhook
        (``notification``) once it was tried."""
        job_id = _id(job_id)
        return JobStatus.from_doc(self._get(_job_path(job_id, "/status")))

    def list(self, project: Optional[str] = None, state: Optional[str] = None, label: Optional[str] = None,
             since: Union[str, datetime, timedelta, None] = None, limit: int = 50,
             runs_after: Optional[JobRef] = None, pool: Optional[str] = None) -> List[Job]:
        """Jobs of the token's projects, newest first, at most ``limit``
        (following the API's pages). ``label`` is ``key=value``; ``since``
        an RFC 3339 time, a datetime, or a timedelta back from now
        (``timedelta(hours=24)``: the last day's jobs); ``runs_after`` a job
        or its id: only the jobs whose ``after`` or ``after_ended`` names
        it (the steps of a pipeline that come right after it); ``pool``
        only the jobs placed on that pool (by their latest placement)."""
        if isinstance(since, timedelta):
            since = datetime.now(timezone.utc) - since
        since = _rfc3339(since)
        after = _id(runs_after) if runs_after is not None else None
        jobs: List[Job] = []
        cursor = None
        while len(jobs) < limit:
            page = self._get("/v1/jobs", {"project": project, "state": state, "label": label, "since": since,
                                          "runs_after": after, "pool": pool, "limit": min(500, limit - len(jobs)),
                                          "cursor": cursor})
            jobs.extend(Job.from_doc(j) for j in page.get("jobs") or [])
            cursor = page.get("next_cursor")
            if not cursor:
                break
        return jobs

    def count(self, project: Optional[str] = None, state: Optional[str] = None, label: Optional[str] = None,
              since: Union[str, datetime, timedelta, None] = None,
              runs_after: Optional[JobRef] = None, pool: Optional[str] = None) -> JobCounts:
        """Counts the jobs :meth:`list` with the same filters would return
        (every one, whatever the limit), by state: how far a sweep has
        come, ``c.count(label="sweep=lr")`` →
        ``JobCounts(total=100, states={"succeeded": 37, "running": 8, …})``,
        ``.finished`` those that ended."""
        if label is not None:
            _check_label(label)
        if isinstance(since, timedelta):
            since = datetime.now(timezone.utc) - since
        after = _id(runs_after) if runs_after is not None else None
        return JobCounts.from_doc(self._get("/v1/jobs/counts", {"project": project, "state": state, "label": label,
                                                                "since": _rfc3339(since), "runs_after": after,
                                                                "pool": pool}))

    def cancel(self, job_id: JobRef) -> Job:
        """Cancels a job that has not finished (a running one is stopped at
        once); a finished one raises :class:`Conflict`."""
        job_id = _id(job_id)
        return Job.from_doc(self._call("POST", _job_path(job_id, "/cancel")))

    def cancel_label(self, label: str, project: Optional[str] = None) -> List[Job]:
        """Cancels every unfinished job whose labels hold ``label``
        (``key=value``: a sweep), those waiting for the jobs they run after
        too, and returns those it cancelled. A job that finishes meanwhile
        is skipped."""
        return self._each_labelled(label, project, _UNFINISHED, self.cancel)

    def cancel_downstream(self, job_id: JobRef) -> List[Job]:
        """Cancels the jobs that run after the job (their ``after`` or
        ``after_ended`` names it) and have not finished, and in turn those
        after them, newest first, then the job itself, and returns those it
        cancelled: a pipeline abandoned whole (``gpuq cancel
        --downstream``). The jobs after it go first, so that none is
        released to run in between (as a job of ``after_ended`` is once
        those it runs after have ended). A job after it that finished is
        neither cancelled nor looked past; one that finishes meanwhile is
        skipped. A job that has finished is left as it is; otherwise the
        job itself raises as :meth:`cancel` does, once the others are
        cancelled."""
        root = _id(job_id)
        done = []
        for job in reversed(self._downstream(root, _UNFINISHED)):
            try:
                done.append(self.cancel(job.id))
            except Conflict:
                pass  # it finished after it was listed
        try:
            done.append(self.cancel(root))
        except Conflict:
            if self.get(root).state in _UNFINISHED:
                raise
        return done

    def _each_labelled(self, label: str, project: Optional[str], states: Sequence[str],
                       act: Callable[[str], Job], oldest_first: bool = False) -> List[Job]:
        """Does act to every job in one of states whose labels hold label
        (state by state, newest first; with oldest_first all of them in the
        order they were submitted) and returns what it returned; a job whose
        state changed after it was listed (:class:`Conflict`) is skipped."""
        _check_label(label)
        listings: Iterable[List[Job]] = (self.list(project=project, state=state, label=label, limit=10_000)
                                         for state in states)
        if oldest_first:
            every = [job for listed in listings for job in listed]
            every.sort(key=lambda j: j.submitted_at or datetime.min.replace(tzinfo=timezone.utc))
            listings = [every]
        done: List[Job] = []
        for listed in listings:
            for job in listed:
                try:
                    done.append(act(job.id))
                except Conflict:
                    pass  # its state changed after it was listed
        return done

    def retry(self, job_id: JobRef, fresh: bool = False) -> Job:
        """Runs a job that failed, died, was cancelled or was rejected again
        and returns it as placed. It keeps its id, trail and checkpoints: it
        is placed afresh under the policy, offers and budgets in effect now,
        its counts of errors and preemptions start again from zero, and its
        next attempt resumes from its latest checkpoint (with ``fresh``, its
        checkpoints are dropped and it starts from nothing). A job that has
        not finished or that succeeded raises :class:`Conflict`; one that no
        placement takes now raises :class:`InvalidRequest` with the reason,
        and is left as it was."""
        job_id = _id(job_id)
        query = {"fresh": "true"} if fresh else None
        return Job.from_doc(self._call("POST", _job_path(job_id, "/retry"), query=query))

    def retry_label(self, label: str, project: Optional[str] = None, fresh: bool = False) -> List[Job]:
        """Retries every job whose labels hold ``label`` (``key=value``: a
        sweep) that failed, died, was cancelled or was rejected, in the
        order they were submitted (a pipeline's first step before the steps
        that run after it), and returns those it retried. A job retried
        meanwhile by someone else is skipped."""
        return self._each_labelled(label, project, _RETRYABLE,
                                   lambda job_id: self.retry(job_id, fresh=fresh), oldest_first=True)

    def retry_downstream(self, job_id: JobRef, fresh: bool = False) -> List[Job]:
        """Retries the job, then the jobs that run after it (their ``after``
        or ``after_ended`` names it) that failed, died, were cancelled or
        were rejected, and in turn those after them, and returns those it
        retried: a pipeline whose first step failed runs again whole,
        ``c.retry_downstream(prep)`` after the fix. A job after it that
        succeeded or has not finished is neither retried nor looked past
        (the jobs after that one are not looked for through it). The jobs
        after it are retried in the order they were submitted, so that each
        is retried after the jobs it runs after and waits for them again
        (``gpuq retry --downstream``). A job that succeeded is not run again,
        but the jobs after it are (a sweep's failed runs after its data
        step, and the summary after them); otherwise the job itself raises
        as :meth:`retry` does, before any other is retried. A job found
        after it that was retried meanwhile by someone else is skipped."""
        root = _id(job_id)
        after = self._downstream(root, _RETRYABLE)
        # A job names only jobs submitted before it: the job itself comes first.
        try:
            done = [self.retry(root, fresh=fresh)]
        except Conflict:
            if self.get(root).state != "succeeded":
                raise
            done = []
        for job in after:
            try:
                done.append(self.retry(job.id, fresh=fresh))
            except Conflict:
                pass  # its state changed after it was listed
        return done

    def _downstream(self, root: str, states: Sequence[str]) -> List[Job]:
        """The jobs that run after root (their ``after`` or ``after_ended``
        names it) in one of states, and in turn those after them, in the
        order they were submitted."""
        after: List[Job] = []
        seen = {root}
        ahead = [root]
        while ahead:
            for job in self.list(runs_after=ahead.pop(0), limit=10_000):
                if job.id not in seen and job.state in states:
                    seen.add(job.id)
                    after.append(job)
                    ahead.append(job.id)
        after.sort(key=lambda j: j.submitted_at or datetime.min.replace(tzinfo=timezone.utc))
        return after

    def checkpoints(self, job_id: JobRef) -> List[Checkpoint]:
        """The job's committed checkpoints, oldest first."""
        job_id = _id(job_id)
        return [Checkpoint.from_doc(c) for c in self._get(_job_path(job_id, "/checkpoints"))]

    def plan(self, spec: Optional[Mapping[str, Any]] = None, **fields: Any) -> Plan:
        """Places a spec without submitting it: the decision the scheduler
        would make, with every rejected offer and its reason. A local
        ``workdir`` is packed for its digest but not uploaded: a plan
        stores nothing."""
        doc = _spec(spec, fields)
        self._ship_workdir(doc, upload=False)
        return Plan.from_doc(self._call("POST", "/v1/plan", body=doc))

    # --- project secrets ------------------------------------------------

    def set_secret(self, name: str, value: str, project: str = "default") -> Secret:
        """Stores ``value`` as the project's secret ``name`` (``gpuq secret
        set``), replacing the value it had, and returns the secret without
        it: no call ever returns a value. A job whose spec names it in
        ``secrets`` gets it as the environment variable ``name``, and the
        worker masks it as ``***`` in the job's logs. Only an admin token of
        the project may set one (:class:`Forbidden` otherwise).

        ``name`` is an environment variable's name (letters, digits and
        ``_``, not starting with a digit or ``GPUQ_``, at most 128
        characters) and ``value`` a str of 1 byte to 32 KiB without NUL;
        the server refuses others with :class:`InvalidRequest`
        (``path.name``, ``body.value``). A new name in a project that holds
        500 secrets raises :class:`Conflict`. Setting the same value again
        gives the same secret, so the request is sent again while the
        server answers 502, 503 or 504, as reads are. The value is never
        put in an exception or a log line: an error answer that echoes it
        has ``***`` in its place."""
        if not isinstance(value, str):
            raise TypeError("value: want a str (the secret's value), got %s" % type(value).__name__)
        answer = self._call("PUT", _secret_path(project, name), body={"value": value},
                            retry_for=_UNAVAILABLE_RETRY, idempotent=True, masked=value)
        return Secret.from_doc(answer)

    def secrets(self, project: str = "default") -> List[Secret]:
        """The project's secrets in name order: who set each and when,
        never a value. Any token of the project may list them; a project
        the token does not cover raises :class:`NotFound`."""
        answer = self._get(_project_path(project, "/secrets"))
        return [Secret.from_doc(s) for s in answer.get("secrets") or []]

    def delete_secret(self, name: str, project: str = "default") -> None:
        """Deletes the project's secret ``name`` (an admin token of the
        project); jobs submitted after that cannot name it. One not set
        raises :class:`NotFound`. The request is not sent again after a
        502, 503 or 504: had the server deleted it, asking again would
        answer 404."""
        self._call("DELETE", _secret_path(project, name))

    def test_webhook(self, name: str, project: str = "default") -> WebhookTest:
        """Has the server post a test message to the webhook whose URL the
        project's secret ``name`` holds (``gpuq secret test-webhook``), once,
        from where and as it posts the ends of jobs naming it in
        ``notify``, and returns how the webhook answered: ``delivered``,
        its ``http_status`` and, when the post failed, ``error`` saying why
        (never the URL, only its ``host``). A failed post is an answer, not
        an exception; a secret not set raises :class:`NotFound`, a token
        that may only read :class:`Forbidden`. The request is not sent
        again after a 502, 503 or 504: the server may have posted."""
        answer = self._call("POST", _secret_path(project, name, under="/webhooks/") + "/test")
        return WebhookTest.from_doc(answer)

    # --- working directories --------------------------------------------

    def upload_workdir(self, path: Union[str, "os.PathLike[str]"], project: Optional[str] = None,
                       progress: bool = True) -> str:
        """Packs the directory ``path`` and uploads it for ``project``
        (default: the token's only project, else ``default``), and returns
        its digest, ``"sha256:<hex>"``, for a spec's ``workdir``. Left out:
        ``.git``, ``.gpuq`` (gpuq dev's token), ``__pycache__``,
        ``.ipynb_checkpoints`` and ``.venv`` at any depth, symlinks out of
        the directory or absolute, and anything not a file, directory or
        symlink (each of these named in a warning). Packing is
        deterministic: unchanged files give the same digest, and uploading
        it again only keeps it longer. A path that is not a directory, or
        one that packs to more than 100 MiB (compressed), raises
        :class:`GpuqError` before anything is sent; the server's own limit
        (``storage.workdir_max_bytes``) may be lower. With progress, an
        upload that lasts over a second shows how far it got."""
        with packed(path) as archive:
            return self._upload(archive, str(path), project, progress)

    def _upload(self, archive: Packed, shown: str, project: Optional[str], progress: bool) -> str:
        """Uploads a packed directory (``PUT /v1/workdirs/<hex>``) and
        returns its digest as the server names it. Sending it again is
        harmless, so it is retried while the server is unavailable."""
        bar = Transfer("uploading workdir " + shown, archive.bytes) if progress else None
        try:
            answer = self._call("PUT", "/v1/workdirs/" + archive.hex, {"project": project or None},
                                body=_FileBody(archive.path, "application/gzip", bar),
                                retry_for=_UNAVAILABLE_RETRY, idempotent=True)
        finally:
            if bar:
                bar.close()
        digest = answer.get("workdir") if isinstance(answer, dict) else None
        if digest != archive.digest:
            raise GpuqError("workdir %s: uploaded %s, but the server answered %r" % (shown, archive.digest, answer))
        return digest

    def _ship_workdir(self, doc: Dict[str, Any], upload: bool = True, progress: bool = True,
                      shipped: Optional[Dict[Tuple[str, Optional[str]], str]] = None) -> None:
        """Replaces a spec's ``workdir`` that names a local directory by its
        digest, uploading the directory for the spec's project (or, without
        ``upload``, only packing it). A digest is left as it is, and so is a
        value of another type, for the server to refuse. ``shipped`` holds
        the digests of directories already uploaded, by path and project."""
        value = doc.get("workdir")
        if not isinstance(value, (str, os.PathLike)) or (isinstance(value, str) and value.startswith(DIGEST_PREFIX)):
            return
        path = os.fspath(value)
        project = doc.get("project") or None
        key = (os.path.abspath(path), project)
        if shipped is not None and key in shipped:
            doc["workdir"] = shipped[key]
            return
        if upload:
            digest = self.upload_workdir(path, project, progress=progress)
        else:
            with packed(path) as archive:
                digest = archive.digest
        if shipped is not None:
            shipped[key] = digest
        doc["workdir"] = digest

    def offers(self) -> List[Offer]:
        """What the server's providers offer now (``gpuq offers``), each
        priced per hour in its own currency (``price_micros``,
        ``currency``): the pools a spec can be placed on."""
        return [Offer.from_doc(o) for o in self._get("/v1/offers").get("offers") or []]

    def spend(self, project: str = "default", since: Union[str, datetime, None] = None) -> Spend:
        """The project's budget ledger (``gpuq spend --project``): what its
        attempts accrued since ``since`` (an RFC 3339 time or a datetime;
        default the start of this month) and what its unfinished jobs still
        reserve, per currency and per job, in micros; and ``budgets``, what
        is left of each budget that applies to the project in its current
        period. Any token of the project may read it."""
        since = _rfc3339(since)
        return Spend.from_doc(self._get(_project_path(project, "/spend"), {"since": since}))

    def events(self, job_id: JobRef, last_event_id: Optional[str] = None) -> Iterator[Event]:
        """The job's state changes, oldest first, then each new one until
        the job is finished; a dropped stream is resumed where it broke."""
        job_id = _id(job_id)
        last = last_event_id
        again = _Reconnect(job_id)
        while True:
            try:
                try:
                    for ev_id, kind, data in self._events(_job_path(job_id, "/events"), last_id=last):
                        again.heard()
                        last = ev_id or last
                        if kind != "state":
                            continue
                        ev = Event.from_doc(data)
                        yield ev
                        if ev.ends:
                            return
                    again.dropped()
                    # The server ended the stream without a terminal state.
                    if self._job_now(job_id).done:
                        return
                except (OSError, http.client.HTTPException):
                    again.dropped()  # resume after the last event
            except GpuqError as e:
                again.unavailable(e)
            again.pause()

    def wait(self, job_id: JobRef, timeout: Optional[float] = None, progress: bool = True) -> Job:
        """Waits until the job is finished and returns it. With progress, the
        state changes are shown (Jupyter, terminal or plain lines on stderr).
        Raises :class:`WaitTimeout` when ``timeout`` seconds pass first."""
        job_id = _id(job_id)
        deadline = None if timeout is None else time.monotonic() + timeout
        job = self._job_now(job_id, _UNAVAILABLE_RETRY if timeout is None else min(timeout, _UNAVAILABLE_RETRY))
        if job.done:
            return job
        shown = Progress(job_id) if progress else None
        last: Optional[str] = None
        state = job.state
        again = _Reconnect(job_id)
        again.dropped()  # reached: the job was read
        try:
            while True:
                remaining = None if deadline is None else deadline - time.monotonic()
                if remaining is not None and remaining <= 0:
                    raise WaitTimeout(job_id, timeout or 0, self._state_now(job_id, state))
                # The server sends a keep-alive every 15 s; a read timeout
                # past that, or at the deadline, reconnects or gives up.
                read_timeout = 30.0 if remaining is None else max(0.1, min(30.0, remaining))
                try:
                    try:
                        for ev_id, kind, data in self._events(_job_path(job_id, "/events"), last_id=last,
                                                               read_timeout=read_timeout):
                            again.heard()
                            last = ev_id or last
                            if kind != "state":
                                continue
                            ev = Event.from_doc(data)
                            state = ev.state
                            if shown:
                                shown.event(ev)
                            if ev.ends:
                                break
                    except (OSError, http.client.HTTPException):
                        pass  # a read timeout or a dropped stream: look, then reconnect
                    job = self._job_now(job_id)
                    if job.done:
                        return job
                    state = job.state
                except GpuqError as e:
                    again.unavailable(e)
                # The stream ended, dropped, or the server is restarting:
                # reconnect after a pause, no later than the deadline.
                again.pause(None if deadline is None else deadline - time.monotonic())
        finally:
            if shown:
                shown.close()

    def wait_all(self, jobs: Optional[Iterable[JobRef]] = None, timeout: Optional[float] = None,
                 progress: bool = True, *, label: Optional[str] = None, project: Optional[str] = None) -> List[Job]:
        """Waits until every job (ids or :class:`Job` objects) is finished,
        one after the other, and returns them as finished, in the order
        given; check ``job.succeeded`` on each. A sweep:
        ``c.wait_all(label="sweep=lr")``, every job whose labels hold that
        entry (of ``project``, else of the token's projects) in the order
        submitted, as ``gpuq wait --label`` waits. ``timeout``
        bounds the whole wait: :class:`WaitTimeout` names the first job not
        finished when it runs out. A :class:`Job` given already finished
        (its state can no longer change) is returned as it is, unasked.
        With progress, a wait that lasts over a second shows how many have
        finished, by outcome (Jupyter, terminal or plain lines on stderr)."""
        jobs = self._jobs_or_label(jobs, label, project, "wait_all")
        deadline = None if timeout is None else time.monotonic() + timeout
        shown = Sweep(len(jobs)) if progress else None
        finished: List[Job] = []
        try:
            for j in jobs:
                job = j if isinstance(j, Job) and j.done else None
                if job is None:
                    job_id = _id(j)
                    remaining = None if deadline is None else max(0.0, deadline - time.monotonic())
                    try:
                        job = self.wait(job_id, timeout=remaining, progress=False)
                    except WaitTimeout as e:
                        raise WaitTimeout(job_id, timeout or 0, e.state) from None
                finished.append(job)
                if shown:
                    shown.finished(job.state)
        finally:
            if shown:
                shown.close()
        return finished

    def _jobs_or_label(self, jobs: Optional[Iterable[JobRef]], label: Optional[str], project: Optional[str],
                       what: str) -> List[JobRef]:
        """The jobs given, or every job whose labels hold label (of
        project, else of the token's projects) in the order submitted."""
        if (jobs is None) == (label is None):
            raise ValueError("%s: give jobs or label, not both or neither" % what)
        if label is None:
            if isinstance(jobs, (str, Job)):
                raise TypeError("jobs: want a list of ids or jobs, got one %s" % type(jobs).__name__)
            return list(jobs or [])
        _check_label(label)
        listed = self.list(project=project, label=label, limit=10_000)
        return sorted(listed, key=lambda j: j.submitted_at or datetime.min.replace(tzinfo=timezone.utc))

    def _state_now(self, job_id: str, known: str) -> str:
        """The job's state, or the one last known when the API cannot be
        reached."""
        try:
            return self._job_now(job_id).state
        except GpuqError as e:
            if not _unavailable(e):
                raise
            return known

    def logs(self, job_id: JobRef, follow: bool = False, attempt: Optional[int] = None,
             tail: Optional[int] = None) -> Iterator[LogChunk]:
        """The job's output as chunks (``chunk.data``), every attempt's in
        order (``chunk.attempt`` says whose), or only ``attempt``'s. With
        ``tail``, it begins with the last ``tail`` lines stored now (of
        ``attempt``'s, when given; 1–10000). With follow, new output is
        yielded as it is written and the iterator ends once the job has
        finished and all of it was sent: ``logs(job, follow=True, tail=20)``
        shows where a long job stands and follows it from there."""
        job_id = _id(job_id)
        if attempt is not None and attempt < 1:
            raise ValueError("attempt: must be 1 or more, got %r" % (attempt,))
        if tail is not None and (isinstance(tail, bool) or not isinstance(tail, int) or not 1 <= tail <= 10000):
            raise ValueError("tail: must be 1–10000 lines, got %r" % (tail,))
        if attempt is not None:
            # An attempt the job has not had yields nothing: say so, unless
            # following a job that may still come to it.
            job = self.get(job_id)
            if job.attempt < attempt and (not follow or job.done):
                raise ValueError("attempt: job %s has had %d attempt(s), not %d" % (job_id, job.attempt, attempt))
        start: Dict[str, Any] = {}
        if tail is not None:
            start["tail"] = tail
            if attempt is not None:
                start["attempt"] = attempt
        for chunk in self._logs(job_id, follow, start):
            if attempt is None or chunk.attempt == attempt:
                yield chunk

    def logs_all(self, jobs: Optional[Iterable[JobRef]] = None, *, label: Optional[str] = None,
                 project: Optional[str] = None, follow: bool = False, attempt: Optional[int] = None,
                 tail: Optional[int] = None, at_once: int = 32) -> Iterator[LogChunk]:
        """The output of several jobs (ids or :class:`Job` objects, in the
        order given), or of every job whose labels hold ``label``
        (``key=value``: a sweep's, a pipeline's, in the order submitted),
        each chunk with ``chunk.job`` set to its job's id. ``attempt`` and
        ``tail`` apply to each job as :meth:`logs` takes them (a job that
        has not had that attempt yields nothing).

        Without follow, each job's output comes whole, one job after the
        other. With follow, up to ``at_once`` jobs are read at the same
        time and their chunks come as they are written, the next job in
        order taking the place of one that has finished, and the iterator
        ends once every job has finished and all of its output was sent:
        ``for chunk in c.logs_all(label="sweep=lr", follow=True, tail=5):
        print(names[chunk.job], chunk.data, end="")`` follows a running
        sweep whole."""
        if isinstance(at_once, bool) or not isinstance(at_once, int) or not 1 <= at_once <= 64:
            raise ValueError("at_once: must be 1–64 jobs, got %r" % (at_once,))
        if attempt is not None and attempt < 1:
            raise ValueError("attempt: must be 1 or more, got %r" % (attempt,))
        if tail is not None and (isinstance(tail, bool) or not isinstance(tail, int) or not 1 <= tail <= 10000):
            raise ValueError("tail: must be 1–10000 lines, got %r" % (tail,))
        ids = [_id(j) for j in self._jobs_or_label(jobs, label, project, "logs_all")]
        start: Dict[str, Any] = {}
        if tail is not None:
            start["tail"] = tail
            if attempt is not None:
                start["attempt"] = attempt

        def one(job_id: str) -> Iterator[LogChunk]:
            for chunk in self._logs(job_id, follow, start):
                if attempt is None or chunk.attempt == attempt:
                    chunk.job = job_id
                    yield chunk

        if not follow or at_once == 1 or len(ids) <= 1:
            for job_id in ids:
                yield from one(job_id)
            return
        yield from _merged([one(job_id) for job_id in ids], at_once)

    def _logs(self, job_id: str, follow: bool, start: Dict[str, Any]) -> Iterator[LogChunk]:
        if not follow:
            after = 0
            while True:
                # The tail sets where the output begins; the next pages go
                # on from next_after.
                page = self._get(_job_path(job_id, "/logs"), dict({"after": after, "limit": 1000}, **(start if after == 0 else {})))
                chunks = page.get("chunks") or []
                for c in chunks:
                    yield LogChunk.from_doc(c)
                nxt = int(page.get("next_after") or 0)
                if not chunks or nxt <= after:
                    return
                after = nxt
        last: Optional[str] = None
        again = _Reconnect(job_id)
        while True:
            try:
                # Reopened after a drop, the stream goes on from its last
                # chunk (Last-Event-ID), which the server prefers to the tail.
                for ev_id, kind, data in self._events(_job_path(job_id, "/logs"), dict({"follow": "true"}, **start), last_id=last):
                    again.heard()
                    if kind == "end":
                        return
                    if kind == "log":
                        last = ev_id or last
                        yield LogChunk.from_doc(data)
                again.dropped()
            except (OSError, http.client.HTTPException):
                again.dropped()  # resume after the last chunk
            except GpuqError as e:
                again.unavailable(e)
            again.pause()

    def results(self, job_id: JobRef, dir: Optional[str] = None, progress: bool = True) -> Results:
        """Downloads a succeeded job's outputs ($GPUQ_OUTPUT_DIR) into
        ``dir`` (default: the job id) and returns them with each file's
        local path. A job that wrote none has no files. A job that has not
        succeeded raises :class:`Conflict`. With progress, a download that
        lasts over a second shows how far it got (Jupyter, terminal or
        plain lines on stderr)."""
        job_id = _id(job_id)
        res = Results.from_doc(self._get(_job_path(job_id, "/results")))
        target = os.path.abspath(dir or job_id)
        res.dir = target
        shown = Transfer("downloading the outputs of " + job_id, sum(f.bytes for f in res.files)) if progress else None
        try:
            for f in res.files:
                local = _inside(target, f.path)
                os.makedirs(os.path.dirname(local), exist_ok=True)
                with self._open("GET", _job_path(job_id, "/results/file"), {"path": f.path},
                                accept="application/octet-stream") as resp, open(local, "wb") as out:
                    while True:
                        block = resp.read(1 << 20)
                        if not block:
                            break
                        out.write(block)
                        if shown:
                            shown.add(len(block))
                f.local_path = local
        finally:
            if shown:
                shown.close()
        return res

    def results_all(self, jobs: Optional[Iterable[JobRef]] = None, dir: str = ".", *, label: Optional[str] = None,
                    project: Optional[str] = None, by_name: bool = False, progress: bool = True) -> Dict[str, Results]:
        """Downloads the outputs of several jobs, or of every job whose
        labels hold ``label`` (a sweep, in the order submitted), each into a
        directory of its own under ``dir`` named by its id, or with
        ``by_name`` by its name (``sweep/lr-0.1``; made a safe file name,
        the end of the id added when several of the jobs share it or a job
        has none), as ``gpuq results --label … --by-name`` does. Returns
        the outputs by job id, in that order. A job that has not succeeded
        has none to download: it is left out, with a warning on the
        ``gpuq`` logger, and the others are downloaded all the same; an id
        of no job of the token's projects raises :class:`NotFound` before
        anything is downloaded."""
        listed = [j if isinstance(j, Job) else self.get(j) for j in self._jobs_or_label(jobs, label, project, "results_all")]
        dirs = _result_dirs(listed, by_name)
        out: Dict[str, Results] = {}
        for job in listed:
            if not job.succeeded:
                job = self.get(job.id)  # it may have succeeded since it was listed
            if not job.succeeded:
                _log.warning("gpuq: job %s (%s) %s: it has no outputs to download", job.id, job.name or "no name", job.state)
                continue
            out[job.id] = self.results(job.id, os.path.join(dir, dirs[job.id]), progress=progress)
        return out


def _result_dirs(jobs: List[Job], by_name: bool) -> Dict[str, str]:
    """Each job's directory: its id, or by_name its name made a safe file
    name, with - and the last 12 hex digits of its id added when several of
    the jobs' names make the same one (letter case aside) or it has none;
    never two jobs in one directory."""
    if not by_name:
        return {j.id: j.id for j in jobs}
    names = {j.id: _file_name(j.name or "") for j in jobs}
    taken: Dict[str, int] = {}
    for n in names.values():
        taken[n.lower()] = taken.get(n.lower(), 0) + 1
    dirs: Dict[str, str] = {}
    used = set()
    for j in jobs:
        n = names[j.id]
        d = j.id[24:] if not n else n + "-" + j.id[24:] if taken[n.lower()] > 1 else n
        if d.lower() in used:
            d = j.id
        used.add(d.lower())
        dirs[j.id] = d
    return dirs


def _file_name(name: str) -> str:
    """name as one safe directory name: ASCII letters, digits and ._=+-,
    anything else as _, no leading . or _, at most 100 characters."""
    safe = "".join(c if c.isascii() and (c.isalnum() or c in "._=+-") else "_" for c in name)
    return safe.lstrip("._")[:100]


#: The first and the longest pause before reconnecting to an API that
#: dropped a stream or could not be reached.
_RETRY_FIRST = 0.25
_RETRY_MAX = 5.0
# How long one request waits for its token's rate limit, and how long a GET
# is asked again while the server answers 502, 503 or 504.
_RATE_LIMIT_RETRY = 120.0
_UNAVAILABLE_RETRY = 30.0

_log = logging.getLogger("gpuq")


class _FileBody:
    """A request body sent from a file, with its content type. Each try
    opens the file again, so that a request sent again (a 429, a 503)
    sends all of it; ``shown`` counts the bytes sent, each once."""

    def __init__(self, path: str, content_type: str, shown: Optional[Transfer] = None) -> None:
        self.path = path
        self.content_type = content_type
        self.size = os.path.getsize(path)
        self.shown = shown
        self.sent = 0  # the most bytes read by a try so far

    def open(self) -> IO[bytes]:
        f = open(self.path, "rb")
        return f if self.shown is None else _Counted(f, self)  # type: ignore[return-value]

    def reached(self, offset: int) -> None:
        """A try has read the file up to offset."""
        if self.shown is not None and offset > self.sent:
            self.shown.add(offset - self.sent)
            self.sent = offset


class _Counted:
    """A file whose reads count towards its body's progress."""

    def __init__(self, f: IO[bytes], body: _FileBody) -> None:
        self._f = f
        self._body = body

    def read(self, n: int = -1) -> bytes:
        block = self._f.read(n)
        self._body.reached(self._f.tell())
        return block

    def close(self) -> None:
        self._f.close()


class _Reconnect:
    """How a stream of one job comes back after a drop or an outage: a
    pause that doubles while nothing is heard, and one warning per outage
    on the ``gpuq`` logger (shown on stderr unless logging is set up). Only
    an API reached once is waited for: a wrong URL fails at once."""

    def __init__(self, job_id: str) -> None:
        self.job_id = job_id
        self.next = _RETRY_FIRST
        self.warned = False
        self.reached = False

    def heard(self) -> None:
        """Something came: the next pause is short again."""
        self.next = _RETRY_FIRST
        self.warned = False
        self.reached = True

    def dropped(self) -> None:
        """A stream that was open ended or broke (failures to connect are
        :class:`Unreachable`, not this)."""
        self.reached = True

    def unavailable(self, e: GpuqError) -> None:
        """Raises e unless it is the API, reached before, briefly out of
        reach."""
        if not self.reached or not _unavailable(e):
            raise e  # never reached (a wrong URL), or a refusal
        if not self.warned:
            _log.warning("job %s: %s; trying again until it answers", self.job_id, e)
            self.warned = True

    def pause(self, limit: Optional[float] = None) -> None:
        time.sleep(self.next if limit is None else max(0.0, min(self.next, limit)))
        self.next = min(self.next * 2, _RETRY_MAX)


def _merged(sources: List[Iterator[Any]], at_once: int) -> Iterator[Any]:
    """The items of sources as they come, up to at_once sources read at the
    same time (each in a thread of its own), the next in order starting
    when one is exhausted. An exception a source raises is raised here once
    the items it yielded before it are. Closing the iterator stops the
    readers at their next item (one blocked waiting for its next item ends
    with it)."""
    items: "queue.Queue[Tuple[int, Any, Optional[BaseException]]]" = queue.Queue(maxsize=256)
    stop = threading.Event()
    done = object()

    def put(msg: Tuple[int, Any, Optional[BaseException]]) -> bool:
        while not stop.is_set():
            try:
                items.put(msg, timeout=0.2)
                return True
            except queue.Full:
                pass
        return False

    def read(i: int) -> None:
        src = sources[i]
        try:
            for item in src:
                if not put((i, item, None)):
                    return
        except BaseException as e:  # handed to the consumer, raised there
            put((i, done, e))
            return
        finally:
            close = getattr(src, "close", None)
            if close is not None and stop.is_set():
                try:
                    close()
                except Exception:
                    pass
        put((i, done, None))

    started = running = 0
    try:
        while started < len(sources) or running:
            while running < at_once and started < len(sources):
                threading.Thread(target=read, args=(started,), daemon=True, name="gpuq-logs-%d" % started).start()
                started += 1
                running += 1
            _, item, err = items.get()
            if item is done:
                running -= 1
                if err is not None:
                    raise err
                continue
            yield item
    finally:
        stop.set()


def _unavailable(e: GpuqError) -> bool:
    """Whether e is the API briefly out of reach (a restart, a proxy's
    502, 503 or 504) rather than an answer."""
    return isinstance(e, Unreachable) or (isinstance(e, APIError) and e.status in (502, 503, 504))


def _rfc3339(t: Union[str, datetime, None]) -> Optional[str]:
    """A time parameter as the API takes it: a naive datetime is UTC."""
    if isinstance(t, datetime):
        return (t if t.tzinfo else t.replace(tzinfo=timezone.utc)).isoformat()
    return t


def _check_label(label: str) -> None:
    """Refuses a label filter that is not key=value."""
    if "=" not in label or label.startswith("="):
        raise ValueError("label: want key=value, got %r" % label)


def _id(job: JobRef) -> str:
    """The id of a job given by its id or as a :class:`Job`."""
    return job.id if isinstance(job, Job) else job


def _job_path(job_id: str, rest: str = "") -> str:
    return "/v1/jobs/" + urllib.parse.quote(str(job_id), safe="") + rest


#: The words (between ``_``) of an environment variable's name that mark it
#: as holding a credential, as ``gpuq submit`` reads them.
_CREDENTIAL_WORDS = frozenset({"KEY", "APIKEY", "TOKEN", "SECRET", "PASSWORD", "PASSWD", "CREDENTIALS"})


def _warn_credential_env(docs: List[Dict[str, Any]]) -> None:
    """Warns, once per name, of an ``env`` entry of docs whose name marks
    it as a credential: a spec's env is shown to every reader of the job, a
    secret (:meth:`Client.set_secret`) to none. The job is submitted as
    given."""
    warned = set()
    for doc in docs:
        env = doc.get("env")
        if not isinstance(env, Mapping):
            continue
        for name in sorted(k for k in env if isinstance(k, str)):
            if name in warned or not _CREDENTIAL_WORDS.intersection(name.upper().split("_")):
                continue
            warned.add(name)
            _log.warning("env %s looks like a credential, and a spec's env is shown to every reader of the job; "
                         "keep it in a secret instead: c.set_secret(%r, value), then secrets=[%r]", name, name, name)


def _project_path(project: str, rest: str = "") -> str:
    return "/v1/projects/" + urllib.parse.quote(project, safe="") + rest


def _secret_path(project: str, name: str, under: str = "/secrets/") -> str:
    """The path of a project's secret (``under`` ``/webhooks/``: of the
    webhook it holds). An empty or non-str name is refused here: its path
    would name the list, or a secret called ``None``."""
    if not isinstance(name, str):
        raise TypeError("name: want a str (an environment variable's name), got %s" % type(name).__name__)
    if not name:
        raise ValueError("name: want an environment variable's name such as WANDB_API_KEY, got ''")
    return _project_path(project, under + urllib.parse.quote(name, safe=""))


def _mask(err: APIError, secret: str) -> None:
    """Puts ``***`` in place of secret wherever err, an answer to a request
    that sent it, echoes it (its title, detail, and each field's message
    and value: the API's validation may quote the input it refused), as the
    worker masks it in logs. err is changed in place, so that it is raised
    without a copy that still holds the secret in its context."""

    def hide(text: str) -> str:
        return text.replace(secret, "***")

    def hide_value(value: Any) -> Any:
        if isinstance(value, str):
            return hide(value)
        if isinstance(value, list):
            return [hide_value(v) for v in value]
        if isinstance(value, dict):
            return {hide_value(k): hide_value(v) for k, v in value.items()}
        return "***" if value is not None and secret in repr(value) else value

    err.title, err.detail = hide(err.title), hide(err.detail)
    err.errors = [ErrorDetail(e.location, hide(e.message), hide_value(e.value)) for e in err.errors]
    err.args = (err._message(),)


# _BATCH_JOBS is the most jobs the API takes in one batch submission.
_BATCH_JOBS = 500


def _shifted(err: APIError, offset: int) -> APIError:
    """err, with the specs it names (body.jobs[i]) numbered from offset."""
    if not offset:
        return err

    def shift(loc: str) -> str:
        return re.sub(r"^body\.jobs\[(\d+)\]", lambda m: "body.jobs[%d]" % (int(m.group(1)) + offset), loc)

    errors = [ErrorDetail(shift(e.location), e.message, e.value) for e in err.errors]
    return type(err)(err.status, title=err.title, detail=err.detail, errors=errors, type=err.type,
                     retry_after=err.retry_after)


def _spec(spec: Optional[Mapping[str, Any]], fields: Dict[str, Any]) -> Dict[str, Any]:
    if spec is not None and not isinstance(spec, Mapping):
        raise TypeError("spec: want a dict (the job spec), got %s" % type(spec).__name__)
    doc = dict(spec or {})
    doc.update(fields)
    _after_ids(doc)
    _input_ids(doc)
    return doc


def _after_ids(doc: Dict[str, Any], where: str = "") -> None:
    """Replaces a spec's ``after`` and ``after_ended`` lists by ones of job
    ids: a :class:`Job` by its id (``after=[prep]``). An element neither a
    str nor a Job, or a value that is one job rather than a list, raises
    TypeError naming it (``where`` first: ``specs[3].after_ended[0]``),
    before any request. A value of another type is left as it is, for the
    server to refuse."""
    for key in ("after", "after_ended"):
        jobs = doc.get(key)
        if isinstance(jobs, (str, Job)):
            raise TypeError("%s%s: want a list of job ids or Jobs, got %s" % (where, key, type(jobs).__name__))
        if not isinstance(jobs, (list, tuple)):
            continue
        ids = []
        for i, a in enumerate(jobs):
            if isinstance(a, Job):
                a = a.id
            elif not isinstance(a, str):
                raise TypeError("%s%s[%d]: want a job id or a Job, got %s" % (where, key, i, type(a).__name__))
            ids.append(a)
        doc[key] = ids


def _input_ids(doc: Dict[str, Any], where: str = "") -> None:
    """Replaces a spec's ``inputs`` by a new list in which an entry whose
    ``job`` is a :class:`Job` is a new dict naming it by its id
    (``{"job": prep}``); other entries are left as they are. An element
    that is not a dict, or a ``job`` neither a str nor a Job, raises
    TypeError naming it (``where`` first: ``specs[3].inputs[0].job``),
    before any request. A value that is not a list is left as it is, for
    the server to refuse."""
    inputs = doc.get("inputs")
    if not isinstance(inputs, (list, tuple)):
        return
    out = []
    for i, entry in enumerate(inputs):
        if not isinstance(entry, Mapping):
            raise TypeError("%sinputs[%d]: want a dict (an input), got %s" % (where, i, type(entry).__name__))
        if "job" in entry:
            job = entry["job"]
            if isinstance(job, Job):
                entry = dict(entry)
                entry["job"] = job.id
            elif not isinstance(job, str):
                raise TypeError("%sinputs[%d].job: want a job id or a Job, got %s" % (where, i, type(job).__name__))
        out.append(entry)
    doc["inputs"] = out


def _is_job_id(s: str) -> bool:
    """Whether s is a job id as the API writes it: a lower-case canonical
    UUID (8-4-4-4-12 hex digits)."""
    try:
        return str(uuid.UUID(s)) == s
    except ValueError:
        return False


class _Earlier:
    """Stands, in a spec's ``after`` or ``after_ended`` or the ``job`` of
    one of its ``inputs``, for the job of an
    earlier spec of the same :meth:`Client.submit_many` call (specs[index])
    until that job is submitted and its id known."""

    __slots__ = ("index",)

    def __init__(self, index: int) -> None:
        self.index = index

    def __repr__(self) -> str:
        return "<job of specs[%d]>" % self.index


def _after_names(doc: Dict[str, Any], where: str, by_name: Mapping[str, List[int]]) -> List[int]:
    """Replaces each name in doc's ``after`` and ``after_ended`` (a str that
    is not a job id) by an :class:`_Earlier` for every spec of that name in
    by_name, the specs before doc, and returns the indexes of the specs so
    named, in order. A name of no earlier spec, or one naming a spec doc
    names already, raises ValueError naming it (``specs[3].after[0]``)."""
    named: List[int] = []
    for key in ("after", "after_ended"):
        jobs = doc.get(key)
        if not isinstance(jobs, list) or not any(isinstance(a, str) and not _is_job_id(a) for a in jobs):
            continue
        out: List[Any] = []
        for k, a in enumerate(jobs):
            if not isinstance(a, str) or _is_job_id(a):
                out.append(a)
                continue
            earlier = by_name.get(a)
            if not earlier:
                raise ValueError("%s%s[%d]: no job named %s before it in specs: a job names the jobs it runs after "
                                 "by their id (or Job), or jobs earlier in specs by their name"
                                 % (where, key, k, json.dumps(a, ensure_ascii=False)))
            for j in earlier:
                if j in named:
                    raise ValueError("%s%s[%d]: %s names specs[%d], which the spec names already"
                                     % (where, key, k, json.dumps(a, ensure_ascii=False), j))
                named.append(j)
                out.append(_Earlier(j))
        doc[key] = out
    return named


def _input_names(doc: Dict[str, Any], where: str, by_name: Mapping[str, List[int]]) -> List[int]:
    """Replaces each entry of doc's ``inputs`` whose ``job`` is a name (a
    str that is not a job id) by one with an :class:`_Earlier` for each
    spec of that name in by_name, the specs before doc, and returns the
    indexes of the specs so named, in order. An entry naming one spec is
    named as the entry says, else by the name it gives; one naming k > 1
    specs becomes k entries, named ``<name>-1`` to ``<name>-k``. A name of
    no earlier spec, or one naming a spec another entry names already,
    raises ValueError naming it (``specs[3].inputs[0].job``)."""
    inputs = doc.get("inputs")
    if not isinstance(inputs, list) or not any(isinstance(e, Mapping) and isinstance(e.get("job"), str)
                                               and not _is_job_id(e["job"]) for e in inputs):
        return []
    named: List[int] = []
    out: List[Any] = []
    for k, entry in enumerate(inputs):
        ref = entry.get("job")
        if not isinstance(ref, str) or _is_job_id(ref):
            out.append(entry)
            continue
        earlier = by_name.get(ref)
        if not earlier:
            raise ValueError("%sinputs[%d].job: no job named %s before it in specs: an input names the job whose "
                             "outputs it reads by its id (or Job), or a job earlier in specs by its name"
                             % (where, k, json.dumps(ref, ensure_ascii=False)))
        name = entry.get("name")
        if name is None or name == "":
            name = ref
        if len(earlier) > 1 and not isinstance(name, str):
            raise TypeError("%sinputs[%d].name: want a str, got %s" % (where, k, type(name).__name__))
        for n, j in enumerate(earlier, 1):
            if j in named:
                raise ValueError("%sinputs[%d].job: %s names specs[%d], whose outputs an input reads already"
                                 % (where, k, json.dumps(ref, ensure_ascii=False), j))
            named.append(j)
            out.append(dict(entry, name=name if len(earlier) == 1 else "%s-%d" % (name, n), job=_Earlier(j)))
    doc["inputs"] = out
    return named


def _request_end(named: List[List[int]], start: int) -> int:
    """Where the request of :meth:`Client.submit_many` that begins with
    specs[start] ends: after :data:`_BATCH_JOBS` specs, or before the first
    spec that names (``named``) a spec of the request, whose id is not
    known until the request is answered."""
    end = min(len(named), start + _BATCH_JOBS)
    for i in range(start + 1, end):
        if any(j >= start for j in named[i]):
            return i
    return end


def _filled(doc: Dict[str, Any], jobs: List[Job]) -> Dict[str, Any]:
    """doc with each :class:`_Earlier` in its ``after``, ``after_ended``
    and the ``job`` of its ``inputs`` replaced by the id of that spec's
    job, one of jobs (those submitted so far, in the specs' order), in new
    lists and entries."""
    doc = dict(doc)
    for key in ("after", "after_ended"):
        if isinstance(doc.get(key), list):
            doc[key] = [jobs[a.index].id if isinstance(a, _Earlier) else a for a in doc[key]]
    if isinstance(doc.get("inputs"), list):
        doc["inputs"] = [dict(e, job=jobs[e["job"].index].id) if isinstance(e.get("job"), _Earlier) else e
                         for e in doc["inputs"]]
    return doc


def _inside(root: str, rel: str) -> str:
    """The local path of an output file, refusing one that would land
    outside root."""
    norm = posixpath.normpath(rel)
    if norm.startswith("/") or norm == ".." or norm.startswith("../"):
        raise GpuqError("results: refusing file path %r outside the output directory" % rel)
    return os.path.join(root, *norm.split("/"))


def _find_dev_config() -> Optional[str]:
    d = os.getcwd()
    while True:
        path = os.path.join(d, DEV_CONFIG)
        if os.path.exists(path):
            return path
        parent = os.path.dirname(d)
        if parent == d:
            return None
        d = parent


def _read_config(path: str) -> Dict[str, str]:
    """The top-level ``key: value`` entries of a YAML config file (enough
    for ``url`` and ``token``; no YAML library is needed)."""
    out: Dict[str, str] = {}
    with open(path, encoding="utf-8") as f:
        for line in f:
            if not line or line[0] in " \t#-":
                continue
            key, sep, value = line.partition(":")
            if not sep:
                continue
            value = value.split(" #", 1)[0].strip()
            if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
                value = value[1:-1]
            out[key.strip()] = value
    return out
