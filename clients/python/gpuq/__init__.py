"""gpuq: a Python client for the gpuq job queue's HTTP API.

>>> import gpuq                                              # doctest: +SKIP
>>> c = gpuq.Client.from_env()                               # doctest: +SKIP
>>> job = c.submit(command=["python", "train.py"], idempotency_key="run-1")  # doctest: +SKIP
>>> c.wait(job.id)                                           # doctest: +SKIP

Standard library only, Python 3.9 or newer.
"""

from . import checkpoint
from .client import Client
from .errors import (APIError, CheckpointError, Conflict, ErrorDetail, Forbidden, GpuqError, InvalidRequest,
                     NotFound, RateLimited, Unauthorized, Unreachable, WaitTimeout)
from .types import (TERMINAL_STATES, Attempt, BudgetUsage, Checkpoint, Dependency, Event, Job, JobCounts, JobStatus,
                    LogChunk, Notification, Offer, Plan, PoolLine, ResultFile, Results, Secret, Spend, SpendAmount, SpendJob,
                    WebhookTest)

__version__ = "0.1.0"

__all__ = [
    "Client", "checkpoint",
    "APIError", "CheckpointError", "Conflict", "ErrorDetail", "Forbidden", "GpuqError", "InvalidRequest", "NotFound",
    "RateLimited", "Unauthorized", "Unreachable", "WaitTimeout",
    "TERMINAL_STATES", "Attempt", "BudgetUsage", "Checkpoint", "Dependency", "Event", "Job", "JobCounts", "JobStatus", "LogChunk",
    "Notification", "Offer", "Plan", "PoolLine", "ResultFile", "Results", "Secret", "Spend", "SpendAmount", "SpendJob",
    "WebhookTest",
]
