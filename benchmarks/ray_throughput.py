"""dse on Ray against Ray Tune on the same cluster: short trials of one Python function.

One run starts a local Ray cluster of three raylets on this host (the tests' cluster:
``tests/support/ray_keeper.py``, head 1 CPU and two workers of 2 CPUs, so 5 CPUs), or uses the
cluster ``--address`` names, then runs the same function over the same N configurations twice:

* **dse**: ``dse.run`` with ``backend = "ray"`` (dse-backend-ray: each trial a detached actor
  running the function in dse's worker process under the trial contract, one ``ray.wait`` per
  polling pass), rolling, ``max_parallelism`` = the cluster's CPUs, a grid over ``i``; then
  the same again with ``shared_filesystem = false`` (each trial's directory on its node, the
  params, the curve, the logs and the result going through Ray: docs/ray.md);
* **Ray Tune**: ``ray.tune.Tuner`` over a function trainable that calls the same function and
  reports its result (``ray.train.report``), ``grid_search`` over the same ``i``, each trial
  asking for 1 CPU, ``max_concurrent_trials`` = the cluster's CPUs, Ray Tune's defaults
  otherwise (``reuse_actors=False``: an actor per trial, as dse starts one per attempt).

The function sleeps ``--seconds`` (0.5 s) and returns a loss. Both sides run the same number of
trials on the same cluster in the same run, dse first. Printed: a table of wall time, trials
per second and the wall time over the ideal (N x seconds / CPUs), and as the last line one JSON
object with ``dse_wall_ratio_to_raytune`` (dse's wall time over Ray Tune's: below 1 is faster)
and ``dse_no_shared_fs_ratio_to_raytune`` (the same without a shared filesystem).

    python benchmarks/ray_throughput.py            # 300 trials (30 minutes on 2 busy cores)
    python benchmarks/ray_throughput.py --quick    # 10 trials: about a minute on 2 busy cores

Needs ``pip install -e packages/backend-ray 'ray[tune]==2.40.0'``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import select
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
KEEPER = HERE.parent / "tests" / "support" / "ray_keeper.py"
CPUS = 5
"""The CPUs of the keeper's cluster (head 1, two workers 2 each)."""


def objective(params: dict[str, Any]) -> dict[str, float]:
    """The trial both sides run: sleep, then a loss that depends on ``i``."""
    time.sleep(float(params["seconds"]))
    return {"loss": (int(params["i"]) * 7919 % 101) / 101.0}


def start_cluster(temp_dir: str) -> tuple[subprocess.Popen[str], str]:
    """The tests' three-raylet cluster on this host, and its address."""
    keeper = subprocess.Popen([sys.executable, str(KEEPER), temp_dir], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                              start_new_session=True)
    assert keeper.stdout is not None
    if not select.select([keeper.stdout], [], [], 300)[0]:
        keeper.kill()
        sys.exit("the local Ray cluster did not start within 300 s")
    address = keeper.stdout.readline().strip()
    if not address:
        sys.exit("the local Ray cluster did not start (tests/support/ray_keeper.py)")
    return keeper, address


def stop_cluster(keeper: subprocess.Popen[str], temp_dir: str) -> None:
    """Stop the cluster, then kill what of it outlived the stop (its node agents), found by
    the cluster's directory on their command lines."""
    assert keeper.stdin is not None
    keeper.stdin.write("stop\n")
    keeper.stdin.close()
    keeper.wait(timeout=120)
    for _ in range(50):
        left = [int(p) for p in os.listdir("/proc") if p.isdigit() and _names(p, temp_dir)]
        if not left:
            return
        for pid in left:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
        time.sleep(0.1)


def _names(pid: str, temp_dir: str) -> bool:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as handle:
            return temp_dir.encode() in handle.read()
    except OSError:
        return False


def run_dse(address: str, n: int, seconds: float, parallelism: int, work: Path,
            *, shared: bool = True) -> float:
    """dse's wall time for *n* trials on the cluster at *address* (the trial directories on
    the nodes, the files through Ray, when not *shared*)."""
    import dse

    files: dict[str, Any] = {} if shared else {"shared_filesystem": False,
                                                "node_dir": str(work / "nodes")}
    campaign = {
        "campaign": {"name": "raybench", "agent": "grid", "backend": "ray", "mode": "rolling",
                     "max_parallelism": parallelism, "poll_interval": ["0.05s", "0.5s"]},
        "space": {"i": {"type": "int", "low": 0, "high": n - 1},
                  "seconds": {"type": "categorical", "choices": [seconds]}},
        "objectives": [{"metric": "loss"}],
        "environment": {"time_limit": "2m"},
        "backend": {"ray": {"address": address, "namespace": f"bench{os.getpid()}",
                            "grace": "2s", **files}},
    }
    start = time.monotonic()
    results = dse.run(campaign, objective, workspace=work / ("dse" if shared else "dse-nfs"),
                      quiet=True, fresh=True)
    wall = time.monotonic() - start
    done = sum(1 for t in results.trials if t.status.value == "completed")
    if done != n:
        sys.exit(f"dse completed {done} of {n} trials")
    return wall


def run_tune(address: str, n: int, seconds: float, parallelism: int, work: Path) -> float:
    """Ray Tune's wall time for the same *n* trials on the same cluster."""
    import ray
    from ray import train, tune

    if not ray.is_initialized():
        ray.init(address=address, log_to_driver=False)

    def trainable(config: dict[str, Any]) -> None:
        train.report(objective(config))

    tuner = tune.Tuner(
        tune.with_resources(trainable, {"cpu": 1}),
        param_space={"i": tune.grid_search(list(range(n))), "seconds": seconds},
        tune_config=tune.TuneConfig(metric="loss", mode="min",
                                    max_concurrent_trials=parallelism),
        run_config=train.RunConfig(storage_path=str(work / "tune"), verbose=0),
    )
    start = time.monotonic()
    grid = tuner.fit()
    wall = time.monotonic() - start
    done = sum(1 for r in grid if r.error is None and r.metrics.get("loss") is not None)
    if done != n:
        sys.exit(f"Ray Tune completed {done} of {n} trials")
    return wall


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="10 trials: about a minute")
    parser.add_argument("--trials", type=int, default=None, help="trials per side (300)")
    parser.add_argument("--seconds", type=float, default=0.5, help="each trial's sleep")
    parser.add_argument("--address", default=None,
                        help="an existing cluster (its CPUs: --parallelism); default: start one")
    parser.add_argument("--parallelism", type=int, default=CPUS)
    args = parser.parse_args()
    n = args.trials or (10 if args.quick else 300)
    for name, value in {"RAY_AIR_NEW_OUTPUT": "0", "TUNE_DISABLE_AUTO_CALLBACK_LOGGERS": "1",
                        "RAY_TRAIN_V2_ENABLED": "0"}.items():
        os.environ.setdefault(name, value)
    with tempfile.TemporaryDirectory(prefix="dseraybench", dir="/tmp") as temp:
        work = Path(temp)
        keeper = None
        address = args.address
        if address is None:
            keeper, address = start_cluster(str(work / "ray"))
        try:
            print(f"running dse: {n} trials of {args.seconds:g} s at P={args.parallelism} ...",
                  file=sys.stderr)
            dse_wall = run_dse(address, n, args.seconds, args.parallelism, work)
            print("running dse without a shared filesystem ...", file=sys.stderr)
            nfs_wall = run_dse(address, n, args.seconds, args.parallelism, work, shared=False)
            print(f"running Ray Tune: {n} trials ...", file=sys.stderr)
            tune_wall = run_tune(address, n, args.seconds, args.parallelism, work)
        finally:
            import ray

            ray.shutdown()
            if keeper is not None:
                stop_cluster(keeper, str(work / "ray"))
    ideal = n * args.seconds / args.parallelism
    print(f"{'method':<26} {'trials':>6} {'wall s':>8} {'ideal s':>8} {'ratio':>7}"
          f" {'trials/s':>9}")
    for name, wall in (("dse (ray)", dse_wall), ("dse (ray, no shared fs)", nfs_wall),
                       ("Ray Tune", tune_wall)):
        print(f"{name:<26} {n:>6} {wall:>8.2f} {ideal:>8.2f} {wall / ideal:>7.2f}"
              f" {n / wall:>9.2f}")
    ratio = dse_wall / tune_wall
    print(json.dumps({"benchmark": "ray_throughput", "trials": n, "seconds": args.seconds,
                      "parallelism": args.parallelism, "dse_wall_s": round(dse_wall, 3),
                      "raytune_wall_s": round(tune_wall, 3),
                      "dse_wall_ratio_to_raytune": round(ratio, 3),
                      "dse_no_shared_fs_wall_s": round(nfs_wall, 3),
                      "dse_no_shared_fs_ratio_to_raytune": round(nfs_wall / tune_wall, 3),
                      "quick": args.quick}))


if __name__ == "__main__":
    main()
