"""A training loop that survives preemption, shipped with its job.

    gpuq submit examples/train/job.yaml --wait

The job runs in an unpacked copy of this directory (workdir: . in job.yaml),
so it reads config.json beside it. It saves its state to
$GPUQ_CHECKPOINT_DIR after every epoch and commits it with
`gpuq checkpoint save`; on SIGTERM (a preemption notice, or its worker
stopping) it saves once more and exits, and the attempt that takes the job
over starts from the epoch it reached. Replace the sleep with your epoch.
"""

import json
import os
import signal
import subprocess
import sys
import time

with open("config.json", encoding="utf-8") as f:
    config = json.load(f)
state_path = os.path.join(os.environ["GPUQ_CHECKPOINT_DIR"], "state.json")
state = {"epoch": 0, "loss": None}
if os.environ.get("GPUQ_RESUMED") == "1":
    with open(state_path, encoding="utf-8") as f:
        state = json.load(f)

stopping = False


def on_sigterm(*_):
    # Only noted here: the loop saves at its next step, never in the
    # middle of a save.
    global stopping
    stopping = True


def save():
    with open(state_path + ".tmp", "w", encoding="utf-8") as f:
        json.dump(state, f)
    os.replace(state_path + ".tmp", state_path)
    subprocess.run(["gpuq", "checkpoint", "save"], check=True, stdout=subprocess.DEVNULL)  # durable when it returns


signal.signal(signal.SIGTERM, on_sigterm)
print("attempt %s starts at epoch %d (lr %g)" % (os.environ["GPUQ_ATTEMPT"], state["epoch"], config["lr"]), flush=True)
while state["epoch"] < config["epochs"]:
    end = time.monotonic() + config["seconds_per_epoch"]
    while time.monotonic() < end and not stopping:
        time.sleep(0.05)  # stands in for an epoch's work
    if stopping:
        save()
        print("saved at epoch %d on SIGTERM" % state["epoch"], flush=True)
        sys.exit(0)
    state["epoch"] += 1
    state["loss"] = round(1.0 / state["epoch"], 4)
    save()
    print("epoch %d loss %s" % (state["epoch"], state["loss"]), flush=True)

with open(os.path.join(os.environ["GPUQ_OUTPUT_DIR"], "metrics.json"), "w", encoding="utf-8") as f:
    json.dump(state, f)
print("done", flush=True)
