"""A real two-node Slurm cluster on this machine, for the tests: munge, slurmctld, and two slurmd.

Each slurmd runs in its own network, UTS and mount namespace, with its own hostname (n1, n2), its own
address (10.201.0.1, .2 on a bridge in this namespace, where slurmctld listens on 10.201.0.254) and an
/etc/hosts of its own that names both nodes. proctrack/cgroup (v1) tracks every process of a step.
Debian's slurm-wlm and munge are installed when missing. Everything lives under one folder and is
torn down by stop().
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
import uuid
from pathlib import Path

NODES = {"n1": "10.201.0.1", "n2": "10.201.0.2"}
CONTROLLER_ADDR = "10.201.0.254"


def _run(*cmd: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(list(cmd), check=check, capture_output=True, text=True)


def install_slurm() -> None:
    if shutil.which("slurmctld") and shutil.which("munged"):
        return
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    subprocess.run(["apt-get", "update", "-qq"], check=True, capture_output=True, env=env)
    subprocess.run(
        ["apt-get", "install", "-y", "-qq", "--no-install-recommends", "slurm-wlm", "munge"],
        check=True, capture_output=True, env=env,
    )  # fmt: skip


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class SlurmCluster:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.tag = uuid.uuid4().hex[:5]
        self.bridge = f"sbr{self.tag}"
        self.namespaces = {name: f"slurm-{name}-{self.tag}" for name in NODES}
        self.processes: list[subprocess.Popen[bytes]] = []
        self.conf = root / "etc" / "slurm.conf"
        self.env = {**os.environ, "SLURM_CONF": str(self.conf)}

    # ---- set-up -------------------------------------------------------------------------------------

    def start(self) -> SlurmCluster:
        install_slurm()
        self._network()
        self._munge()
        self._config()
        self._spawn(["slurmctld", "-D", "-f", str(self.conf)], self.root / "log" / "slurmctld.out")
        for name in NODES:
            hosts = self.root / "etc" / f"hosts-{name}"
            script = f"hostname {name} && mount --bind {hosts} /etc/hosts && exec slurmd -D -N {name} -f {self.conf}"
            self._spawn(
                # nsenter, not `ip netns exec`: that remounts /sys and hides the cgroup hierarchies
                [
                    "nsenter",
                    f"--net=/run/netns/{self.namespaces[name]}",
                    "unshare",
                    "--uts",
                    "--mount",
                    "sh",
                    "-c",
                    script,
                ],
                self.root / "log" / f"slurmd-{name}.out",
            )
        self._wait_idle()
        return self

    def _network(self) -> None:
        _run("ip", "link", "add", self.bridge, "type", "bridge")
        _run("ip", "addr", "add", f"{CONTROLLER_ADDR}/24", "dev", self.bridge)
        _run("ip", "link", "set", self.bridge, "up")
        for index, (name, addr) in enumerate(NODES.items()):
            ns, outside, inside = self.namespaces[name], f"sh{index}{self.tag}", f"sn{index}{self.tag}"
            _run("ip", "netns", "add", ns)
            _run("ip", "link", "add", outside, "type", "veth", "peer", "name", inside, "netns", ns)
            _run("ip", "link", "set", outside, "master", self.bridge)
            _run("ip", "link", "set", outside, "up")
            _run("ip", "-n", ns, "addr", "add", f"{addr}/24", "dev", inside)
            _run("ip", "-n", ns, "link", "set", inside, "up")
            _run("ip", "-n", ns, "link", "set", "lo", "up")

    def _munge(self) -> None:
        munge = self.root / "munge"
        (munge / "etc").mkdir(parents=True)
        (munge / "run").mkdir()
        (munge / "lib").mkdir()
        os.chmod(munge / "etc", 0o700)
        os.chmod(munge / "run", 0o755)
        key = munge / "etc" / "munge.key"
        key.write_bytes(os.urandom(1024))
        os.chmod(key, 0o400)
        self.munge_socket = munge / "run" / "munge.socket.2"
        _run(
            "munged", "--force", f"--socket={self.munge_socket}", f"--key-file={key}",
            f"--pid-file={munge / 'run' / 'munged.pid'}", f"--log-file={munge / 'munged.log'}",
            f"--seed-file={munge / 'lib' / 'munged.seed'}",
        )  # fmt: skip

    def _config(self) -> None:
        etc, state, log = self.root / "etc", self.root / "state", self.root / "log"
        for folder in (etc, state, log, state / "ctld", *(state / f"slurmd-{name}" for name in NODES)):
            folder.mkdir(parents=True, exist_ok=True)
        hosts = "".join(f"{addr} {name}\n" for name, addr in NODES.items())
        hosts = f"127.0.0.1 localhost\n{CONTROLLER_ADDR} {socket.gethostname()}\n" + hosts
        for name in NODES:
            (etc / f"hosts-{name}").write_text(hosts)
        ctld_port, ports = _free_port(), {name: _free_port() for name in NODES}
        nodes = "".join(
            f"NodeName={name} NodeAddr={addr} Port={ports[name]} CPUs=2 Boards=1 SocketsPerBoard=1 CoresPerSocket=2 "
            "ThreadsPerCore=1 RealMemory=2000 State=UNKNOWN\n"
            for name, addr in NODES.items()
        )
        self.conf.write_text(
            f"""ClusterName=ssft{self.tag}
SlurmctldHost={socket.gethostname()}({CONTROLLER_ADDR})
SlurmctldPort={ctld_port}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket={self.munge_socket}
CryptoType=crypto/munge
StateSaveLocation={state}/ctld
SlurmdSpoolDir={state}/slurmd-%n
SlurmctldPidFile={state}/slurmctld.pid
SlurmdPidFile={state}/slurmd-%n.pid
SlurmctldLogFile={log}/slurmctld.log
SlurmdLogFile={log}/slurmd-%n.log
ProctrackType=proctrack/cgroup
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
SchedulerType=sched/builtin
SelectType=select/linear
MpiDefault=none
MailProg=/bin/true
ReturnToService=2
KillWait=10
SlurmdTimeout=30
{nodes}PartitionName=debug Nodes={",".join(NODES)} Default=YES MaxTime=INFINITE State=UP
"""
        )
        (etc / "cgroup.conf").write_text("CgroupPlugin=cgroup/v1\nCgroupAutomount=no\nConstrainCores=no\n")

    def _spawn(self, cmd: list[str], log: Path) -> None:
        log.parent.mkdir(parents=True, exist_ok=True)
        handle = log.open("wb")
        self.processes.append(subprocess.Popen(cmd, env=self.env, stdout=handle, stderr=subprocess.STDOUT))

    def _wait_idle(self, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            out = subprocess.run(["sinfo", "-h", "-o", "%T"], env=self.env, capture_output=True, text=True)
            states = out.stdout.split()
            if len(states) >= 1 and all(s == "idle" for s in states) and out.returncode == 0:
                nodes = subprocess.run(
                    ["sinfo", "-h", "-N", "-o", "%N %T"], env=self.env, capture_output=True, text=True
                )
                if nodes.stdout.count("idle") == len(NODES):
                    return
            time.sleep(0.5)
        raise RuntimeError("the Slurm nodes never became idle:\n" + self.logs())

    # ---- use ---------------------------------------------------------------------------------------

    def slurm(self, *cmd: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(list(cmd), env=self.env, capture_output=True, text=True, timeout=60)

    def logs(self) -> str:
        return "\n".join(f"== {p.name}\n{p.read_text()[-3000:]}" for p in sorted((self.root / "log").glob("*")))

    # ---- tear-down ---------------------------------------------------------------------------------

    def stop(self) -> None:
        for proc in self.processes:
            proc.terminate()
        for proc in self.processes:
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
        pid_file = self.root / "munge" / "run" / "munged.pid"
        if pid_file.exists():
            subprocess.run(["kill", pid_file.read_text().strip()], capture_output=True)
        for ns in self.namespaces.values():
            _run("ip", "netns", "del", ns, check=False)
        _run("ip", "link", "del", self.bridge, check=False)
