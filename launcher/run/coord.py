"""The nodes' channel: node 0's safe-sft hosts a torch.distributed TCPStore; every node's safe-sft uses it.

Imported only when NNODES > 1 (it loads torch, about a second). Keys are namespaced by the run id; the
values are JSON messages that launcher.plan.consensus validates. Bounds, documented in docs/multinode.md:
- a node that cannot resolve MASTER_ADDR or reach node 0's store at start gives up after `connect_timeout`
  (--node-timeout), and so does one whose connection another program at the port takes and never answers;
- before the first attempt every node checks in (`gather`): node 0 waits `report_timeout` for all of
  them, so no torchrun starts to wait for a peer that never came, and stops them all when a NODE_RANK
  was given twice or a node's terms (its arguments, planned strategy, processes per node, --resume-latest)
  differ from its own;
- while training, each node checks the store every POLL_SECONDS: if node 0's safe-sft is gone, the
  check fails at once (the connection closes) and the node stops its training and exits with an error;
- node 0 waits `report_timeout` for every node's report of an attempt, then stops the job;
- a node waits `report_timeout` + DECISION_SLACK for node 0's decision, then exits with an error.
Every wait says on stderr what it waits for, for whom and until when (launcher.run.poll: after a second,
then every 30 s), and ends within about a second when a signal arrives (`signals`).
"""

from __future__ import annotations

import contextlib
import json
import re
import socket
import sys
import threading
import time
from collections.abc import Callable, Mapping
from datetime import datetime, timedelta
from typing import Any

from launcher.errors import SafeSftError
from launcher.plan.consensus import (
    SAME_VERSION,
    Decision,
    NodeReport,
    decode_decision,
    decode_report,
    encode,
    terms_difference,
)
from launcher.run.poll import WaitInterrupted, wait_until

POLL_SECONDS = 1.0
DECISION_SLACK = 60.0
MAX_WHY = 500  # characters of a node's reason for leaving that node 0 prints
PROBE_SECONDS = 1.0  # one TCP connect try to node 0's store; a signal waits at most this long
SETTLE_SECONDS = 2.0  # node 0's look for a rank given twice once all checked in: two of the waiting nodes' polls
STORE_SLACK = 5.0  # beyond --node-timeout, for torch's own connect retries to end first with their error
VERDICT_READ_SECONDS = 10.0  # node 0 keeps its store up this long for the nodes to read why none starts
DIFFERENT_TERMS_FIX = (
    "start every node with the same arguments; where their plans differ, set --deepspeed and NPROC_PER_NODE"
)

TWICE_FIX = "give each node its own NODE_RANK, from 0 to NNODES - 1"


def _twice(node: int, run_id: str) -> str:
    return f"two safe-sft processes joined run {run_id} as node {node} (NODE_RANK={node} given twice)"


# The signals received so far, as (how many, the last one): a wait ends when the count grows.
Signals = Callable[[], tuple[int, int | None]]


class CoordinationLost(SafeSftError):
    """Node 0's safe-sft (the store) is unreachable or a node never answered."""

    exit_code = 4


def _say(line: str) -> None:
    sys.stderr.write(f"safe-sft: {line}\n")
    sys.stderr.flush()


class Coordinator:
    def __init__(
        self,
        *,
        host: str,
        port: int,
        node: int,
        nnodes: int,
        run_id: str,
        connect_timeout: float = 300.0,
        report_timeout: float = 300.0,
        sleep: Callable[[float], None] = time.sleep,
        signals: Signals = lambda: (0, None),
        say: Callable[[str], None] = _say,
    ) -> None:
        self.node, self.nnodes, self.run_id = node, nnodes, run_id
        self.report_timeout = report_timeout
        self.sleep = sleep
        self.signals = signals
        self.say = say
        self.where = f"{host}:{port}"
        since = signals()[0]  # a Ctrl-C while torch loads ends the first wait too
        from torch.distributed import TCPStore  # type: ignore[attr-defined]  # only here: loads torch

        if node != 0:
            self._wait_for_store(host, port, connect_timeout, since)
        else:
            self._resolve_own(host, port)
        try:
            self.store: Any = self._open_store(
                lambda: TCPStore(
                    host, port, is_master=node == 0, timeout=timedelta(seconds=connect_timeout), wait_for_workers=False
                ),
                connect_timeout,
                since,
            )
        except (CoordinationLost, WaitInterrupted):  # said already: the store never answered, or a signal came
            raise
        except Exception as err:
            raise CoordinationLost(
                f"cannot {'open' if node == 0 else 'reach'} the coordination store at {self.where}: {err}",
                "start node 0's safe-sft first, check MASTER_ADDR and that the port is free (--coord-port)",
            ) from None
        self.last_check = 0.0
        self.departed: set[int] = set()  # nodes that will not read node 0's decision
        self.silent: set[int] = set()  # nodes whose report of the last attempt never came (node 0's view)

    def _open_store(self, make: Callable[[], Any], timeout: float, since: int) -> Any:
        """torch's TCPStore, made in a thread of its own while this one waits. A listener at the port that is no
        store (another program's) can leave torch's handshake waiting for an answer forever, past its own
        timeout and deaf to signals (a call blocked in C++): here the wait is bounded by --node-timeout, and
        Ctrl-C or SIGTERM end it. Raises what `make` raised."""
        made: dict[str, Any] = {}

        def build() -> None:
            try:
                made["store"] = make()
            except Exception as err:  # handed to the waiting thread
                made["error"] = err

        thread = threading.Thread(target=build, name="safe-sft-store", daemon=True)
        thread.start()
        what = f"the coordination store at {self.where} to answer (run {self.run_id})"
        patience = timeout + min(STORE_SLACK, timeout)
        if not self.wait(lambda: not thread.is_alive(), patience, what, since=since):
            raise CoordinationLost(
                f"node {self.node}: {self.where} accepts connections, but no coordination store answered within "
                f"{patience:.0f} s: another program holds that port on node 0",
                "free node 0's MASTER_PORT + 1, or pass --coord-port with a free port (the same on every node)",
            )
        if "error" in made:
            raise made["error"]
        return made["store"]

    # ---- waiting -------------------------------------------------------------------------------------

    def wait(
        self, condition: Callable[[], bool], timeout: float, what: str | Callable[[], str], since: int | None = None
    ) -> bool:
        """`wait_until` with this node's progress lines and its signals; `since`: the signal count to beat.

        `what` names what is awaited and for whom (a callable when that changes as the wait goes on)."""
        baseline = self.signals()[0] if since is None else since
        until = (datetime.now() + timedelta(seconds=timeout)).strftime("%H:%M:%S")

        def interrupted() -> int | None:
            count, last = self.signals()
            return last if count > baseline else None

        def named() -> str:
            return what if isinstance(what, str) else what()

        def progress(left: float) -> None:
            self.say(
                f"node {self.node}: waiting for {named()}, until {until} ({left:.0f} s left of {timeout:.0f} s); "
                "Ctrl-C stops"
            )

        return wait_until(condition, timeout, sleep=self.sleep, interrupted=interrupted, progress=progress, what=named)

    def _wait_for_store(self, host: str, port: int, timeout: float, since: int) -> None:
        """Until node 0's store accepts connections: in Python, so that a signal is seen within a second
        (torch's own connect loop blocks, and logs a C++ warning per try)."""
        last_error = ""

        def reachable() -> bool:
            nonlocal last_error
            try:
                addresses = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
            except socket.gaierror as err:
                last_error = f"cannot resolve MASTER_ADDR={host} ({err.strerror})"
                return False
            for family, kind, proto, _, address in addresses:
                try:
                    with socket.socket(family, kind, proto) as probe:
                        probe.settimeout(PROBE_SECONDS)
                        probe.connect(address)
                        return True
                except OSError as err:
                    last_error = f"nothing answers at {self.where} ({err.strerror or err})"
            return False

        what = f"node 0's safe-sft (its coordination store at {self.where}, run {self.run_id})"

        def awaited() -> str:  # each progress line says why node 0 is not there yet: a typo shows at once
            return f"{what}; so far: {last_error}" if last_error else what

        if not self.wait(reachable, timeout, awaited, since=since):
            raise CoordinationLost(
                f"node {self.node}: gave up after {timeout:.0f} s (--node-timeout) waiting for {what}: {last_error}",
                "start node 0's safe-sft, check MASTER_ADDR (every node must resolve and reach it) and --coord-port",
            )

    def _resolve_own(self, host: str, port: int) -> None:
        """Node 0 opens the store at MASTER_ADDR and connects to it itself: a name that does not resolve here
        is one line (torch's own attempt logs C++ stack frames, then times out)."""
        try:
            socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
        except socket.gaierror as err:
            raise CoordinationLost(
                f"node 0: cannot resolve MASTER_ADDR={host} ({err.strerror}), "
                "the address of node 0, which is this host",
                "set MASTER_ADDR to this host's name or address (`hostname -f`), or NODE_RANK if this is not node 0",
            ) from None

    def _key(self, attempt: int, what: str) -> str:
        return f"safe-sft/{self.run_id}/attempt-{attempt}/{what}"

    def _check(self, key: str) -> bool:
        try:
            return bool(self.store.check([key]))
        except Exception:
            raise CoordinationLost(
                f"lost node 0's safe-sft (coordination store {self.where})",
                "node 0 stopped or died: see its terminal; restart the job on all nodes",
            ) from None

    def _get(self, key: str) -> str:
        try:
            return bytes(self.store.get(key)).decode()
        except Exception:
            raise CoordinationLost(
                f"lost node 0's safe-sft (coordination store {self.where})", "restart the job"
            ) from None

    def _add(self, key: str, amount: int) -> int:
        try:
            return int(self.store.add(key, amount))
        except Exception:
            raise CoordinationLost(
                f"lost node 0's safe-sft (coordination store {self.where})", "restart the job"
            ) from None

    def _set(self, key: str, value: str) -> None:
        try:
            self.store.set(key, value)
        except Exception:
            raise CoordinationLost(
                f"lost node 0's safe-sft (coordination store {self.where})", "restart the job"
            ) from None

    # ---- during an attempt -------------------------------------------------------------------------

    def stop_requested(self, attempt: int) -> bool:
        """True once any node asked everyone to stop this attempt; raises when node 0 is gone."""
        now = time.monotonic()
        if now - self.last_check < POLL_SECONDS:
            return False
        self.last_check = now
        return self._check(self._key(attempt, "stop"))

    def request_stop(self, attempt: int) -> None:
        self._set(self._key(attempt, "stop"), str(self.node))

    # ---- between attempts --------------------------------------------------------------------------

    def _wait_for(self, key: str, timeout: float, what: str) -> bool:
        return self.wait(lambda: self._check(key), timeout, what)

    # ---- before the first attempt ------------------------------------------------------------------

    def gather(self, terms: Mapping[str, str]) -> None:
        """Every node's safe-sft checks in before any torchrun starts, with its first attempt's terms
        (consensus.launch_terms); node 0 waits --node-timeout for all, and stops every node when any
        node's terms differ from its own: nodes given different arguments would train neither plan.

        Without it node 0's torchrun would wait, silent, for a peer that never started.
        """
        if self._add(self._joined_count(self.node), 1) > 1:  # a second node with this rank: keep out
            raise CoordinationLost(_twice(self.node, self.run_id), TWICE_FIX)
        self._set(self._joined(self.node), json.dumps(dict(terms)))
        go = f"safe-sft/{self.run_id}/all-joined"
        if self.node == 0:
            missing = list(range(1, self.nnodes))
            left: dict[int, str] = {}

            def everyone() -> bool:
                left.update((n, self._get(self._left(n))) for n in missing if self._check(self._left(n)))
                missing[:] = [n for n in missing if not self._check(self._joined(n))]
                return not missing or bool(left)

            def what() -> str:
                waiting = ",".join(map(str, missing))
                return f"node(s) {waiting} of {self.nnodes} to start safe-sft (run {self.run_id})"

            if not self.wait(everyone, self.report_timeout, what):
                raise CoordinationLost(
                    f"gave up after {self.report_timeout:.0f} s (--node-timeout) waiting for {what()}",
                    "start safe-sft on every node with the same MASTER_ADDR, MASTER_PORT and run id "
                    "(srun --ntasks-per-node=1 does); raise --node-timeout when nodes start late",
                )
            if left:
                node, why = min(left.items())
                stopped = f"node {node} stopped before training: {why}"
                self._set(go, stopped)
                for peer in (n for n in range(1, self.nnodes) if n not in left and n not in missing):
                    self._wait_for(f"{go}-read-{peer}", VERDICT_READ_SECONDS, f"node {peer} to read why")
                raise CoordinationLost(stopped, f"see node {node}'s terminal")
            # a second process given a node's rank checks in as it connects: nodes that had all waited for node 0
            # come within a moment of each other, and one taken as that node would train beside the other's
            # line, unseen here
            self.sleep(SETTLE_SECONDS)
            differ = self._first_disagreement(terms)
            self._set(go, differ or "1")
            if differ:
                for node in range(1, self.nnodes):  # the store goes with node 0: let each node read why first
                    self._wait_for(f"{go}-read-{node}", VERDICT_READ_SECONDS, f"node {node} to read why")
                raise CoordinationLost(differ, DIFFERENT_TERMS_FIX)
            return
        if not self._wait_for(
            go, self.report_timeout + DECISION_SLACK, f"every node to start (node 0 gathers them, run {self.run_id})"
        ):
            raise CoordinationLost(
                f"node 0 did not see every node start within {self.report_timeout + DECISION_SLACK:.0f} s",
                "see node 0's terminal",
            )
        verdict = self._get(go)
        if verdict != "1":
            self._set(f"{go}-read-{self.node}", "1")
            leaver = re.match(r"node (\d+) stopped before training", verdict)
            raise CoordinationLost(verdict, f"see node {leaver[1]}'s terminal" if leaver else DIFFERENT_TERMS_FIX)

    def leave(self, why: str) -> None:
        """A node that stops before it checked in (its output dir not node 0's, a signal) tells node 0 why, so
        that node 0 stops at once with that line, not --node-timeout later for a node it thinks never started.
        Node 0 itself, or a store already gone, has no one to tell."""
        if self.node == 0:
            return
        with contextlib.suppress(CoordinationLost):
            self._set(self._left(self.node), why[:MAX_WHY])

    def _left(self, node: int) -> str:  # why the node stopped before it checked in
        return f"safe-sft/{self.run_id}/left-{node}"

    def _joined(self, node: int) -> str:  # the node's terms, once it checked in
        return f"safe-sft/{self.run_id}/joined-{node}"

    def _joined_count(self, node: int) -> str:  # how many processes checked in as this node
        return f"safe-sft/{self.run_id}/joined-count-{node}"

    def _first_disagreement(self, node0: Mapping[str, str]) -> str | None:
        """Node 0's view once every node checked in: a rank taken twice, else the first node whose terms
        differ from node 0's; None when they all may start."""
        for node in range(1, self.nnodes):
            if self._add(self._joined_count(node), 0) > 1:
                return _twice(node, self.run_id)
        return next(filter(None, (self._differs(n, node0) for n in range(1, self.nnodes))), None)

    def _differs(self, node: int, node0: Mapping[str, str]) -> str | None:
        try:
            terms = json.loads(self._get(self._joined(node)))
        except ValueError:
            terms = None
        if not isinstance(terms, dict):
            return f"node {node}'s safe-sft sent no terms node 0 can read: {SAME_VERSION}"
        return terms_difference(node, {str(k): str(v) for k, v in terms.items()}, node0)

    def exchange(
        self,
        attempt: int,
        report: NodeReport,
        decide: Callable[[list[NodeReport]], Decision],
        report_timeout: float | None = None,
    ) -> Decision:
        """Publish this node's report; node 0 decides from all of them; every node returns that decision.
        `report_timeout`: node 0's wait for the reports, where shorter than --node-timeout (the whole wait,
        not one per node)."""
        self._set(self._key(attempt, f"report-{self.node}"), encode(report))
        if self.node == 0:
            reports = []
            patience = self.report_timeout if report_timeout is None else min(report_timeout, self.report_timeout)
            deadline = time.monotonic() + patience
            for node in range(self.nnodes):
                key = self._key(attempt, f"report-{node}")
                left = max(deadline - time.monotonic(), 0.0)
                if self._wait_for(key, left, f"node {node}'s report of attempt {attempt}"):
                    reports.append(decode_report(self._get(key), self.run_id, attempt, self.nnodes))
            self.silent = set(range(self.nnodes)) - {r.node for r in reports}  # lost: they never reported
            self.departed = {r.node for r in reports if r.kind == "interrupted"} | self.silent
            self._set(self._key(attempt, "decision"), encode(decide(reports)))
        key = self._key(attempt, "decision")
        if not self._wait_for(key, self.report_timeout + DECISION_SLACK, f"node 0's decision after attempt {attempt}"):
            raise CoordinationLost(
                f"no decision from node 0 within {self.report_timeout + DECISION_SLACK:.0f} s", "see node 0's terminal"
            )
        return decode_decision(self._get(key), self.run_id, attempt)

    def exchange_report_only(self, attempt: int, report: NodeReport) -> None:
        """An interrupted node reports and leaves; node 0 decides for the others."""
        self._set(self._key(attempt, f"report-{self.node}"), encode(report))

    def acknowledge(self, attempt: int, timeout: float = 30.0) -> None:
        """After a final decision: the other nodes say they read it; node 0 keeps the store up until then."""
        if self.node != 0:
            self._set(self._key(attempt, f"ack-{self.node}"), "1")
            return
        for node in range(1, self.nnodes):
            if node not in self.departed:  # an interrupted node reported and left; a lost one never reported
                self._wait_for(self._key(attempt, f"ack-{node}"), timeout, f"node {node} to read the final decision")

    # ---- the shared output dir ---------------------------------------------------------------------

    def publish_token(self, token: str) -> None:
        self._set(f"safe-sft/{self.run_id}/shared-token", token)

    def read_token(self) -> str:
        key = f"safe-sft/{self.run_id}/shared-token"
        if not self._wait_for(key, self.report_timeout, "node 0's shared-filesystem token"):
            raise CoordinationLost("node 0 never published its shared-filesystem token", "see node 0's terminal")
        return self._get(key)
