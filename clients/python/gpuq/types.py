"""Typed views of the API's documents (see api/openapi.json).

Each object keeps the document it was read from in ``raw``, so fields added
to the API later stay reachable.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any, Dict, List, Optional

#: Job states after which nothing changes.
TERMINAL_STATES = frozenset({"succeeded", "failed", "cancelled", "rejected", "dead"})

_FRACTION = re.compile(r"\.(\d+)")


def parse_time(value: Optional[str]) -> Optional[datetime]:
    """Parses an RFC 3339 time as the API writes it (Z, up to nanoseconds),
    which datetime.fromisoformat only accepts from Python 3.11 on."""
    if not value:
        return None
    text = value.replace("Z", "+00:00").replace("z", "+00:00")
    text = _FRACTION.sub(lambda m: "." + m.group(1)[:6].ljust(6, "0"), text, count=1)
    t = datetime.fromisoformat(text)
    return t if t.tzinfo else t.replace(tzinfo=timezone.utc)


@dataclass
class Job:
    """A job as the system of record holds it."""

    id: str
    project: str
    name: str
    state: str
    attempt: int
    errors: int
    preemptions: int
    placement_version: int
    submitted_at: Optional[datetime]
    updated_at: Optional[datetime]
    spec: Dict[str, Any] = field(default_factory=dict)
    idempotency_key: str = ""
    pool: str = ""
    exit_code: Optional[int] = None
    reason: str = ""
    finalized_at: Optional[datetime] = None
    raw: Dict[str, Any] = field(default_factory=dict, repr=False)

    @property
    def done(self) -> bool:
        """True once the job is in a terminal state."""
        return self.state in TERMINAL_STATES

    @property
    def succeeded(self) -> bool:
        return self.state == "succeeded"

    @classmethod
    def from_doc(cls, d: Dict[str, Any]) -> "Job":
        return cls(id=d["id"], project=d.get("project", ""), name=d.get("name", ""), state=d["state"],
                   attempt=int(d.get("attempt", 0)), errors=int(d.get("errors", 0)),
                   preemptions=int(d.get("preemptions", 0)), placement_version=int(d.get("placement_version", 0)),
                   submitted_at=parse_time(d.get("submitted_at")), updated_at=parse_time(d.get("updated_at")),
                   spec=d.get("spec") or {}, idempotency_key=d.get("idempotency_key", ""), pool=d.get("pool", ""),
                   exit_code=d.get("exit_code"), reason=d.get("reason", ""),
                   finalized_at=parse_time(d.get("finalized_at")), raw=d)


@dataclass
class Attempt:
    """One claim of a job by a worker."""

    attempt: int
    worker_id: str
    host: str
    pid: int
    pool: str
    started_at: Optional[datetime]
    heartbeat_at: Optional[datetime]
    ended_at: Optional[datetime] = None
    outcome: str = ""
    exit_code: Optional[int] = None
    raw: Dict[str, Any] = field(default_factory=dict, repr=False)

    @classmethod
    def from_doc(cls, d: Dict[str, Any]) -> "Attempt":
        return cls(attempt=int(d["attempt"]), worker_id=d.get("worker_id", ""), host=d.get("host", ""),
                   pid=int(d.get("pid", 0)), pool=d.get("pool", ""), started_at=parse_time(d.get("started_at")),
                   heartbeat_at=parse_time(d.get("heartbeat_at")), ended_at=parse_time(d.get("ended_at")),
                   outcome=d.get("outcome", ""), exit_code=d.get("exit_code"), raw=d)


@dataclass
class Event:
    """One state change of a job."""

    job_id: str
    at: Optional[datetime]
    state: str
    attempt: int
    message: str = ""
    exit_code: Optional[int] = None
    outcome: str = ""
    #: True for an end (a terminal state) that a retry of the job followed.
    superseded: bool = False
    raw: Dict[str, Any] = field(default_factory=dict, repr=False)

    @property
    def ends(self) -> bool:
        """True when the job finished here: a terminal state no retry
        superseded."""
        return self.state in TERMINAL_STATES and not self.superseded

    @classmethod
    def from_doc(cls, d: Dict[str, Any]) -> "Event":
        return cls(job_id=d.get("job_id", ""), at=parse_time(d.get("at")), state=d["state"],
                   attempt=int(d.get("attempt", 0)), message=d.get("message", ""), exit_code=d.get("exit_code"),
                   outcome=d.get("outcome", ""), superseded=bool(d.get("superseded", False)), raw=d)


@dataclass
class Checkpoint:
    """One committed checkpoint archive."""

    job_id: str
    seq: int
    attempt: int
    bytes: int
    sha256: str
    region: str
    created_at: Optional[datetime]
    raw: Dict[str, Any] = field(default_factory=dict, repr=False)

    @classmethod
    def from_doc(cls, d: Dict[str, Any]) -> "Checkpoint":
        return cls(job_id=d.get("job_id", ""), seq=int(d["seq"]), attempt=int(d.get("attempt", 0)),
                   bytes=int(d.get("bytes", 0)), sha256=d.get("sha256", ""), region=d.get("region", ""),
                   created_at=parse_time(d.get("created_at")), raw=d)


@dataclass
class PoolLine:
    """Where a placed job stands in its pool's line: ``ahead`` jobs of the pool have waited longer, ``running`` of
    its jobs run now, on ``workers`` live workers, ``paused`` of which take no work for a while after host errors in a
    row (both None where the server does not count them)."""

    pool: str
    ahead: int
    running: int
    workers: Optional[int] = None
    paused: Optional[int] = None

    @classmethod
    def from_doc(cls, d: Dict[str, Any]) -> "PoolLine":
        workers, paused = d.get("workers"), d.get("paused")
        return cls(pool=d.get("pool", ""), ahead=int(d.get("ahead", 0)), running=int(d.get("running", 0)),
                   workers=None if workers is None else int(workers), paused=None if paused is None else int(paused))


@dataclass
class Dependency:
    """A job another one runs after (its spec's ``after`` or
    ``after_ended``), as it stands now: the job waits until each of its
    ``after`` has succeeded, and is cancelled when one ends otherwise, and
    until each of its ``after_ended`` has ended, however it ended. For an
    id that names no job of the project, ``name`` and ``state`` are
    empty."""

    job_id: str
    name: str
    state: str
    raw: Dict[str, Any] = field(default_factory=dict, repr=False)

    @classmethod
    def from_doc(cls, d: Dict[str, Any]) -> "Dependency":
        return cls(job_id=d.get("job_id", ""), name=d.get("name", ""), state=d.get("state", ""), raw=d)


@dataclass
class Notification:
    """The delivery of a job's latest end to the webhook its spec's
    ``notify`` names: ``state`` and ``ended_at`` name the end, ``outcome``
    is ``"pending"`` (tried, and tried again at ``next_at``),
    ``"delivered"`` (the webhook answered 2xx) or ``"failed"`` (given up
    on: ``error`` says why); ``http_status`` is the webhook's last answer,
    0 when none came."""

    state: str
    ended_at: Optional[datetime]
    outcome: str
    tries: int
    last_at: Optional[datetime] = None
    next_at: Optional[datetime] = None
    http_status: int = 0
    error: str = ""
    raw: Dict[str, Any] = field(default_factory=dict, repr=False)

    @classmethod
    def from_doc(cls, d: Dict[str, Any]) -> "Notification":
        return cls(state=d.get("state", ""), ended_at=parse_time(d.get("ended_at")), outcome=d.get("outcome", ""),
                   tries=int(d.get("tries", 0)), last_at=parse_time(d.get("last_at")),
                   next_at=parse_time(d.get("next_at")), http_status=int(d.get("http_status") or 0),
                   error=d.get("error", ""), raw=d)


@dataclass
class JobStatus:
    """A job with its attempts, latest checkpoint, placement and history,
    and the jobs it runs after: ``after`` those that must succeed first,
    ``after_ended`` those that must have ended first, each in its spec's
    order; ``dependents`` the jobs that run after it (their ``after`` or
    ``after_ended`` names it), in the order they were submitted, at most
    1000 (:meth:`Client.list` with ``runs_after`` lists them all);
    ``notification`` how its latest end was posted to the webhook its
    spec's ``notify`` names, None until one was tried; ``spent`` what its
    attempts have cost so far, one amount per currency (``"4.12 EUR"``)."""

    job: Job
    attempts: List[Attempt]
    history: List[Event]
    last_checkpoint: Optional[Checkpoint] = None
    pool: str = ""
    placement: Optional[Dict[str, Any]] = None
    last_log_lines: List[str] = field(default_factory=list)
    waiting: Optional[PoolLine] = None
    after: List[Dependency] = field(default_factory=list)
    after_ended: List[Dependency] = field(default_factory=list)
    dependents: List[Dependency] = field(default_factory=list)
    notification: Optional[Notification] = None
    spent: List[str] = field(default_factory=list)
    raw: Dict[str, Any] = field(default_factory=dict, repr=False)

    @classmethod
    def from_doc(cls, d: Dict[str, Any]) -> "JobStatus":
        cp, line, note = d.get("last_checkpoint"), d.get("waiting"), d.get("notification")
        return cls(job=Job.from_doc(d["job"]), attempts=[Attempt.from_doc(a) for a in d.get("attempts") or []],
                   history=[Event.from_doc(e) for e in d.get("history") or []],
                   last_checkpoint=Checkpoint.from_doc(cp) if cp else None, pool=d.get("pool", ""),
                   placement=d.get("placement"), last_log_lines=list(d.get("last_log_lines") or []),
                   waiting=PoolLine.from_doc(line) if line else None,
                   after=[Dependency.from_doc(a) for a in d.get("after") or []],
                   after_ended=[Dependency.from_doc(a) for a in d.get("after_ended") or []],
                   dependents=[Dependency.from_doc(a) for a in d.get("dependents") or []],
                   spent=list(d.get("spent") or []),
                   notification=Notification.from_doc(note) if note else None, raw=d)


@dataclass
class JobCounts:
    """How many jobs a listing's filters match, by state (every state
    present, 0 for those no job is in): how far a sweep has come."""

    total: int
    states: Dict[str, int]

    @property
    def finished(self) -> int:
        """The jobs counted in a terminal state."""
        return sum(n for s, n in self.states.items() if s in TERMINAL_STATES)

    @classmethod
    def from_doc(cls, d: Dict[str, Any]) -> "JobCounts":
        return cls(total=int(d.get("total", 0)), states={str(k): int(v) for k, v in (d.get("states") or {}).items()})


@dataclass
class LogChunk:
    """A piece of a job's output, as one attempt wrote it; ``job`` is the
    job's id where :meth:`Client.logs_all` read it among others."""

    seq: int
    attempt: int
    stream: str
    data: str
    job: str = ""

    @classmethod
    def from_doc(cls, d: Dict[str, Any]) -> "LogChunk":
        return cls(seq=int(d.get("seq", 0)), attempt=int(d.get("attempt", 0)), stream=d.get("stream", ""),
                   data=d.get("data", ""))


@dataclass
class ResultFile:
    """One file among a job's outputs; ``local_path`` once downloaded."""

    path: str
    bytes: int
    local_path: Optional[str] = None


@dataclass
class Results:
    """A succeeded job's outputs. A job that wrote none has no files."""

    job_id: str
    bytes: int
    files: List[ResultFile]
    sha256: str = ""
    region: str = ""
    dir: Optional[str] = None

    @classmethod
    def from_doc(cls, d: Dict[str, Any]) -> "Results":
        return cls(job_id=d.get("job_id", ""), bytes=int(d.get("bytes", 0)),
                   files=[ResultFile(f["path"], int(f.get("bytes", 0))) for f in d.get("files") or []],
                   sha256=d.get("sha256", ""), region=d.get("region", ""))


@dataclass
class Plan:
    """A dry-run placement: whether the job could be placed, and why."""

    feasible: bool
    reason: str
    decision: Dict[str, Any]

    @classmethod
    def from_doc(cls, d: Dict[str, Any]) -> "Plan":
        return cls(feasible=bool(d.get("feasible")), reason=d.get("reason", ""), decision=d.get("decision") or {})


@dataclass
class Secret:
    """A project's secret as the API lists it: its name, when it was last
    set, and by whom (a token's id, or ``cli``). The API never sends a
    value back, so none is here."""

    project: str
    name: str
    set_at: Optional[datetime]
    set_by: str = ""
    raw: Dict[str, Any] = field(default_factory=dict, repr=False)

    @classmethod
    def from_doc(cls, d: Dict[str, Any]) -> "Secret":
        return cls(project=d.get("project", ""), name=d["name"], set_at=parse_time(d.get("set_at")),
                   set_by=d.get("set_by", ""), raw=d)


@dataclass
class WebhookTest:
    """How a test post to the webhook a project's secret holds went
    (:meth:`Client.test_webhook`): ``delivered`` when it answered 2xx,
    its ``http_status`` (0 when none came), and ``error`` saying why a
    failed post failed. ``host`` is the webhook's host; its URL, a
    credential, is never sent back."""

    project: str
    secret: str
    delivered: bool
    host: str = ""
    http_status: int = 0
    error: str = ""
    raw: Dict[str, Any] = field(default_factory=dict, repr=False)

    @classmethod
    def from_doc(cls, d: Dict[str, Any]) -> "WebhookTest":
        return cls(project=d.get("project", ""), secret=d.get("secret", ""), delivered=bool(d.get("delivered")),
                   host=d.get("host", ""), http_status=int(d.get("http_status") or 0), error=d.get("error", ""), raw=d)


@dataclass
class SpendAmount:
    """A project's spend in one currency, in micros (millionths) of it:
    what its attempts accrued since the ledger's start, and what its
    unfinished jobs still reserve against its budgets."""

    currency: str
    micros: int
    reserved_micros: int


@dataclass
class SpendJob:
    """One job of the ledger in one currency: its placement's estimate,
    what its attempts accrued and what it still reserves, in micros."""

    job_id: str
    name: str
    state: str
    provider: str
    region: str
    pool: str
    currency: str
    estimated_micros: int
    accrued_micros: int
    reserved_micros: int


@dataclass
class BudgetUsage:
    """One budget of the policy in effect that applies to the project, with
    what the project used of it in the budget's current period, as amounts
    such as ``"3.20 EUR"`` in the policy's base currency. ``remaining`` is
    the cap less spent and reserved: what placement still lets jobs
    reserve; it is negative when over."""

    budget: str
    cap: str
    period: str
    period_start: Optional[datetime]
    spent: str
    reserved: str
    remaining: str


@dataclass
class Spend:
    """A project's budget ledger since a time (``gpuq spend --project``),
    with the budgets that apply to the project and what is left of each."""

    project: str
    since: Optional[datetime]
    amounts: List[SpendAmount]
    jobs: List[SpendJob]
    truncated: bool = False
    budgets: List[BudgetUsage] = field(default_factory=list)
    raw: Dict[str, Any] = field(default_factory=dict, repr=False)

    @classmethod
    def from_doc(cls, d: Dict[str, Any]) -> "Spend":
        return cls(project=d.get("project", ""), since=parse_time(d.get("since")),
                   budgets=[BudgetUsage(b.get("budget", ""), b.get("cap", ""), b.get("period", ""),
                                        parse_time(b.get("period_start")) if b.get("period") != "total" else None,
                                        b.get("spent", ""), b.get("reserved", ""), b.get("remaining", ""))
                            for b in d.get("budgets") or []],
                   amounts=[SpendAmount(a.get("currency", ""), int(a.get("micros", 0)), int(a.get("reserved_micros", 0)))
                            for a in d.get("amounts") or []],
                   jobs=[SpendJob(j.get("job_id", ""), j.get("name", ""), j.get("state", ""), j.get("provider", ""),
                                  j.get("region", ""), j.get("pool", ""), j.get("currency", ""),
                                  int(j.get("estimated_micros", 0)), int(j.get("accrued_micros", 0)),
                                  int(j.get("reserved_micros", 0)))
                         for j in d.get("jobs") or []],
                   truncated=bool(d.get("truncated")), raw=d)


@dataclass
class Offer:
    """Capacity a provider offers now (``gpuq offers``): one pool's machine
    shape, tier and hourly price in micros of its currency."""

    provider: str
    pool: str
    region: str
    country: str
    card: str
    gpu_count: int
    gpu_memory_gb: int
    vcpu: int
    memory_gb: int
    tier: str
    price_micros: int
    currency: str
    availability: str = ""
    raw: Dict[str, Any] = field(default_factory=dict, repr=False)

    @classmethod
    def from_doc(cls, d: Dict[str, Any]) -> "Offer":
        price = d.get("price_per_hour") or {}
        return cls(provider=d.get("provider", ""), pool=d.get("pool", ""), region=d.get("region", ""),
                   country=d.get("country", ""), card=d.get("card", ""), gpu_count=int(d.get("gpu_count", 0)),
                   gpu_memory_gb=int(d.get("gpu_memory_gb", 0)), vcpu=int(d.get("vcpu", 0)),
                   memory_gb=int(d.get("memory_gb", 0)), tier=d.get("tier", ""),
                   price_micros=int(price.get("micros", 0)), currency=price.get("currency", ""),
                   availability=d.get("availability", ""), raw=d)
