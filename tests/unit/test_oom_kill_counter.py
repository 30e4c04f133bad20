"""The kernel's OOM-kill count read where the run's processes live (launcher/run/evidence.py): its memory
cgroup and those below it, not the host-wide /proc/vmstat, where one can be read (hostile47env F2)."""

from __future__ import annotations

from pathlib import Path

from launcher.run.evidence import OomKills, kernel_oom_evidence, oom_kill_count


def _v1(tmp_path: Path, own: int, child: int | None = None, neighbour: int = 0) -> tuple[Path, Path]:
    root = tmp_path / "cgroup"
    mine = root / "memory" / "kubepods" / "pod1"
    mine.mkdir(parents=True)
    (mine / "memory.oom_control").write_text(f"oom_kill_disable 0\nunder_oom 0\noom_kill {own}\n")
    if child is not None:
        (mine / "rank1").mkdir()
        (mine / "rank1" / "memory.oom_control").write_text(f"oom_kill_disable 0\nunder_oom 0\noom_kill {child}\n")
    (root / "memory" / "kubepods" / "pod2").mkdir()
    (root / "memory" / "kubepods" / "pod2" / "memory.oom_control").write_text(f"oom_kill {neighbour}\n")
    proc = tmp_path / "self-cgroup"
    proc.write_text("5:cpu,cpuacct:/kubepods/pod1\n4:memory:/kubepods/pod1\n0::/\n")
    return root, proc


def test_v1_counts_this_cgroup_and_those_below_it_and_not_a_neighbours(tmp_path: Path) -> None:
    root, proc = _v1(tmp_path, own=1, child=2, neighbour=7)
    found = oom_kill_count(root, proc)
    assert found == OomKills(3, root / "memory" / "kubepods" / "pod1" / "memory.oom_control", own_cgroup=True)


def test_v2_reads_memory_events_which_counts_the_subtree_itself(tmp_path: Path) -> None:
    root = tmp_path / "cgroup"
    mine = root / "system.slice" / "job.scope"
    mine.mkdir(parents=True)
    (mine / "memory.events").write_text("low 0\nhigh 0\nmax 4\noom 2\noom_kill 2\noom_group_kill 0\n")
    proc = tmp_path / "self-cgroup"
    proc.write_text("0::/system.slice/job.scope\n")
    assert oom_kill_count(root, proc) == OomKills(2, mine / "memory.events", own_cgroup=True)


def test_without_a_cgroup_counter_the_host_wide_count_is_said_to_be_that(tmp_path: Path) -> None:
    proc = tmp_path / "self-cgroup"
    proc.write_text("0::/\n")  # the root cgroup of v2: no memory.events
    found = oom_kill_count(tmp_path / "nothing", proc)
    if found is None:  # a kernel without /proc/vmstat's oom_kill line
        return
    assert found.source == Path("/proc/vmstat") and not found.own_cgroup
    moved = kernel_oom_evidence(found, OomKills(found.count + 1, found.source, False))
    assert moved == (
        f"kernel OOM killer ran 1 time(s) during the attempt (/proc/vmstat oom_kill {found.count} -> "
        f"{found.count + 1}: host-wide, any process's)",
    )


def test_the_evidence_names_the_cgroups_limit_where_its_own_counter_moved(tmp_path: Path) -> None:
    counter = tmp_path / "memory.oom_control"
    before, after = OomKills(0, counter, True), OomKills(1, counter, True)
    lines = kernel_oom_evidence(before, after, 350 * 1024 * 1024)
    assert (
        lines[0]
        == f"kernel OOM killer ran 1 time(s) in this run's memory cgroup during the attempt ({counter} oom_kill 0 -> 1)"
    )
    assert lines[1].startswith("that cgroup's memory limit is 350.0 MiB, below the host's RAM")
    assert kernel_oom_evidence(before, after) == lines[:1]  # no limit below the host's RAM: none named
    assert kernel_oom_evidence(before, before) == ()  # it did not move
    assert kernel_oom_evidence(before, OomKills(5, Path("/proc/vmstat"), False)) == ()  # read in two places
