"""Real Slurm: munge, slurmctld and two slurmd "nodes" (own namespaces and hostnames, proctrack/cgroup)
started by the test; an sbatch job whose step is `srun safe-sft ...` on the tiny model."""

from __future__ import annotations

import json
import os
import re
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from tests.stack.slurm_cluster import SlurmCluster
from tests.stack.test_supervise_real import (
    assert_no_sample_lost_or_repeated,
    fault_env,
    last_step,
    run_dirs,
    swift_args,
)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SlurmCluster]:
    if os.geteuid() != 0:
        pytest.fail("CANNOT RUN: the Slurm daemons, namespaces and cgroups of this tier need root")
    slurm = SlurmCluster(tmp_path_factory.mktemp("slurm"))
    try:
        yield slurm.start()
    finally:
        slurm.stop()


def submit(
    cluster: SlurmCluster,
    tmp: Path,
    args: list[str],
    sbatch: tuple[str, ...] = (),
    extra_env: dict[str, str] | None = None,
    nodes: int = 2,
) -> str:
    env = {k: v for k, v in fault_env(tmp).items() if k.startswith(("SAFE_SFT_", "TORCH_", "PYTHON"))}
    env.update(extra_env or {})
    exports = " ".join(f"{k}={v}" for k, v in env.items())
    script = tmp / "job.sh"
    script.write_text(
        f"""#!/bin/bash
#SBATCH --nodes={nodes} --ntasks-per-node=1 --output={tmp}/job-%j.out
export OMP_NUM_THREADS=1 NPROC_PER_NODE=1 {exports}
srun --ntasks-per-node=1 --output={tmp}/task-%t.out --error={tmp}/task-%t.err \\
  {sys.executable} -m launcher --grace-period 5 {" ".join(args)}
"""
    )
    result = cluster.slurm("sbatch", "--parsable", *sbatch, str(script))
    assert result.returncode == 0, result.stderr
    return result.stdout.strip().split(";")[0]


def wait_gone(cluster: SlurmCluster, job: str, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if job not in cluster.slurm("squeue", "-h", "-o", "%i").stdout.split():
            return
        time.sleep(1)
    pytest.fail(f"job {job} still in the queue after {timeout} s:\n{cluster.logs()}")


def ranks_training(cluster: SlurmCluster, tmp_path: Path, ranks: int = 2) -> None:
    """Until every node's ranks have started (the fault plugin's records), and a little more."""
    deadline = time.monotonic() + 240
    while len(list((tmp_path / "ranks").glob("rank-*.json"))) < ranks and time.monotonic() < deadline:
        time.sleep(1)
    assert len(list((tmp_path / "ranks").glob("rank-*.json"))) == ranks, cluster.logs()
    time.sleep(3)


def mark_n2_down(cluster: SlurmCluster) -> None:
    """As slurmctld does with a node that stops answering: the job on it ends (set back to resume after)."""
    down = cluster.slurm("scontrol", "update", "nodename=n2", "state=down", "reason=safe-sft-test")
    assert down.returncode == 0, down.stderr


def test_d_sbatch_srun_safe_sft_on_two_nodes(cluster: SlurmCluster, tiny, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    out = tmp_path / "out"
    job = submit(cluster, tmp_path, swift_args(tiny, out, max_steps=4))
    wait_gone(cluster, job, 300)
    plans = [(tmp_path / f"task-{t}.err").read_text() for t in (0, 1)]
    port = 20000 + 2 * (int(job) % 10000)  # the first srun step of the job: SLURM_STEP_ID 0
    for rank, plan in enumerate(plans):
        assert re.search(r"NNODES\s+2\s+slurm", plan), plan[-3000:]
        assert re.search(rf"NODE_RANK\s+{rank}\s+slurm", plan)
        assert re.search(r"MASTER_ADDR\s+n1\s+slurm", plan)
        assert re.search(rf"MASTER_PORT\s+{port}\s+slurm", plan)
        assert "safe-sft: succeeded after 1 attempt(s)" in plan
    assert last_step(run_dirs(out)[-1]) == "4/4"


def test_d_scancel_term_reaches_every_training_process_and_nothing_restarts(
    cluster: SlurmCluster, tiny, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    out = tmp_path / "out"
    job = submit(cluster, tmp_path, swift_args(tiny, out, max_steps=100000, save_steps=100000))
    ranks_training(cluster, tmp_path)
    pids = {json.loads(p.read_text())["pid"] for p in (tmp_path / "ranks").glob("rank-*.json")}
    result = cluster.slurm("scancel", "--signal=TERM", job)
    assert result.returncode == 0, result.stderr
    wait_gone(cluster, job, 120)
    alive = [pid for pid in pids if psutil.pid_exists(pid) and psutil.Process(pid).status() != psutil.STATUS_ZOMBIE]
    assert alive == []
    reports = [json.loads(p.read_text()) for p in (out / "safe-sft").glob("*-node*/report.json")]
    assert len(reports) == 2
    for report in reports:
        assert report["outcome"] == "interrupted" and report["exit_code"] == 143
        assert len(report["attempts"]) == 1
    assert len(list((tmp_path / "ranks").glob("rank-*.json"))) == 2  # no second attempt started


def test_a_one_node_job_cancelled_mid_run_ends_in_one_line_with_slurms_reason(
    cluster: SlurmCluster, tiny, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    """A one-node job step stopped by scancel (SIGTERM) crashed safe-sft with an UnboundLocalError on its way
    to asking Slurm why (hostile46slurm F1): exit 1 for 143, a traceback, the report left `running`. Only
    two-node jobs had been stopped here."""
    out = tmp_path / "out"
    job = submit(cluster, tmp_path, swift_args(tiny, out, max_steps=100000, save_steps=100000), nodes=1)
    ranks_training(cluster, tmp_path, ranks=1)
    result = cluster.slurm("scancel", job)
    assert result.returncode == 0, result.stderr
    wait_gone(cluster, job, 120)
    said = (tmp_path / "task-0.err").read_text()
    assert "launcher/cli.py" not in said, said[-3000:]  # no traceback of safe-sft's own
    [report] = [json.loads(p.read_text()) for p in (out / "safe-sft").glob("*/report.json")]
    assert report["outcome"] == "interrupted" and report["exit_code"] == 143, said[-3000:]
    assert f"Slurm is ending job {job} (JobState=COMPLETING) short of its time limit" in report["give_up_reason"]
    assert "a scancel" in said


def test_a_one_node_job_at_its_time_limit_is_said_to_have_reached_it(
    cluster: SlurmCluster, tiny, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    """Slurm's SIGTERM at the time limit (hostile46slurm F1): the step sees its job COMPLETING, not TIMEOUT, so
    the limit is read from the job's run time."""
    out = tmp_path / "out"
    args = swift_args(tiny, out, max_steps=100000, save_steps=100000)
    job = submit(cluster, tmp_path, args, ("--time=1",), nodes=1)
    wait_gone(cluster, job, 200)
    said = (tmp_path / "task-0.err").read_text()
    assert "launcher/cli.py" not in said, said[-3000:]
    [report] = [json.loads(p.read_text()) for p in (out / "safe-sft").glob("*/report.json")]
    assert report["outcome"] == "interrupted" and report["exit_code"] == 143, said[-3000:]
    assert f"Slurm ended job {job} at its time limit" in report["give_up_reason"], report["give_up_reason"]


def test_a_node_that_fails_mid_run_is_named_as_slurms_reason_for_the_sigterm(
    cluster: SlurmCluster, tiny, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    """The controller marks node n2 down mid-run and ends the job: every safe-sft got only a SIGTERM and said
    "interrupted", where nothing named the node failure (the requeued job then waits for a node that is down).
    safe-sft now asks Slurm why, and says it."""
    out = tmp_path / "out"
    # not requeued: Slurm requeues a job whose node failed where the job allows it
    job = submit(cluster, tmp_path, swift_args(tiny, out, max_steps=100000, save_steps=100000), ("--no-requeue",))
    ranks_training(cluster, tmp_path)
    try:
        mark_n2_down(cluster)
        wait_gone(cluster, job, 180)
    finally:
        cluster.slurm("scontrol", "update", "nodename=n2", "state=resume")
    reports = [json.loads(p.read_text()) for p in (out / "safe-sft").glob("*-node*/report.json")]
    assert reports, cluster.logs()
    for report in reports:
        assert report["outcome"] == "interrupted" and report["exit_code"] == 143
        assert f"job {job}: one of its nodes failed" in report["give_up_reason"], report["give_up_reason"]
    said = (tmp_path / "task-0.err").read_text()
    assert "one of its nodes failed" in said and "sinfo -R" in said, said[-3000:]


def test_a_job_slurm_requeues_after_a_node_failed_is_said_to_run_again_from_step_0_without_resume_latest(
    cluster: SlurmCluster, tiny, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    """Where the job allows a requeue (Slurm's default), a node failure requeues it: the requeued job runs the
    same command, which without --resume-latest trains from step 0 again. The first run says so."""
    out = tmp_path / "out"
    job = submit(cluster, tmp_path, swift_args(tiny, out, max_steps=100000, save_steps=100000), ("--requeue",))
    ranks_training(cluster, tmp_path)
    try:
        mark_n2_down(cluster)
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline and len(list((out / "safe-sft").glob("*-node*/report.json"))) < 2:
            time.sleep(1)
        while time.monotonic() < deadline and not all(
            json.loads(p.read_text())["outcome"] != "running" for p in (out / "safe-sft").glob("*-node*/report.json")
        ):
            time.sleep(1)
    finally:
        cluster.slurm("scancel", job)
        wait_gone(cluster, job, 180)
        cluster.slurm("scontrol", "update", "nodename=n2", "state=resume")
    first = [json.loads(p.read_text()) for p in sorted((out / "safe-sft").glob("*-node*/report.json"))[:2]]
    for report in first:
        assert report["outcome"] == "interrupted" and report["exit_code"] == 143
        assert f"Slurm requeued job {job}" in report["give_up_reason"], report["give_up_reason"]
        assert "--resume-latest" in report["give_up_reason"]


def test_scancel_usr1_checkpoints_on_both_nodes_requeues_and_resumes_from_that_step(
    cluster: SlurmCluster, tiny, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    """A notice to every process of the step: both nodes' ranks agree on one step and save it, safe-sft
    exits 75 and requeues the job; the requeued job (SLURM_RESTART_COUNT=1) resumes from that step."""
    out = tmp_path / "out"
    args = ["--requeue", *swift_args(tiny, out, save_steps=100)]
    job = submit(cluster, tmp_path, args, sbatch=("--requeue",), extra_env={"SAFE_SFT_STEP_SLEEP": "1"})
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline and not any("2/8" in p.read_text() for p in out.glob("v*/logging.jsonl")):
        time.sleep(0.5)
    assert any("2/8" in p.read_text() for p in out.glob("v*/logging.jsonl")), cluster.logs()
    result = cluster.slurm("scancel", "--signal=USR1", job)
    assert result.returncode == 0, result.stderr
    deadline = time.monotonic() + 400
    while time.monotonic() < deadline and len(list((out / "safe-sft").glob("*-node*/report.json"))) < 4:
        time.sleep(1)
    wait_gone(cluster, job, 300)
    reports = [json.loads(p.read_text()) for p in sorted((out / "safe-sft").glob("*-node*/report.json"))]
    assert len(reports) == 4, cluster.logs()
    preempted = [r for r in reports if r["outcome"] == "preempted"]
    finished = [r for r in reports if r["outcome"] == "succeeded"]
    assert len(preempted) == 2 and len(finished) == 2, [r["outcome"] for r in reports]
    [step] = {r["attempts"][0]["preempted"]["step"] for r in preempted}  # every node saved the same step
    assert 2 < step < 8 and all(r["exit_code"] == 75 for r in preempted)
    for r in finished:
        assert r["attempts"][0]["resumed_from"]["step"] == step  # resumed from the very step the notice saved
    assert all(r["lost_work"]["steps"] == 0 and r["lost_work"]["failures"] == 0 for r in reports)  # lost: 0
    assert last_step(run_dirs(out)[-1]) == "8/8"
    # the two jobs together trained on exactly the samples plain `swift sft` does, step by step
    assert_no_sample_lost_or_repeated(tiny, tmp_path, fault_env(tmp_path), save_steps=100)


def test_a_step_on_one_of_the_jobs_two_nodes_plans_a_run_on_that_node(
    cluster: SlurmCluster, tiny, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    """`srun -N1 --relative=1` in a 2-node job (SLURM_NODEID 0 there, SLURM_NODELIST the job's): it had been
    refused, and with NNODES set as the fix said, MASTER_ADDR was n1, a host outside the step. One node's run
    takes loopback, as torchrun does (hostile46slurm F2)."""
    script = tmp_path / "job.sh"
    script.write_text(
        f"""#!/bin/bash
#SBATCH --nodes=2 --ntasks-per-node=1 --output={tmp_path}/job-%j.out
export OMP_NUM_THREADS=1 NPROC_PER_NODE=1
srun -N1 -n1 --relative=1 --output={tmp_path}/plan.json --error={tmp_path}/plan.err \\
  {sys.executable} -m launcher plan --json {" ".join(swift_args(tiny, tmp_path / "out"))}
"""
    )
    result = cluster.slurm("sbatch", "--parsable", str(script))
    assert result.returncode == 0, result.stderr
    wait_gone(cluster, result.stdout.strip().split(";")[0], 120)
    plan = json.loads((tmp_path / "plan.json").read_text() or "null")
    assert plan is not None, (tmp_path / "plan.err").read_text()[-2000:]
    topology = plan["topology"]
    assert (topology["nnodes"]["value"], topology["nnodes"]["source"]) == (1, "slurm")
    assert (topology["node_rank"]["value"], topology["master_addr"]["value"]) == (0, "127.0.0.1")
    assert any("this step runs on 1 of the job's 2 nodes" in w for w in plan["warnings"])
