"""The nodes' channel: node 0's safe-sft hosts a torch.distributed TCPStore; every node's safe-sft uses it.

Imported only when NNODES > 1 (it loads torch, about a second). Keys are namespaced by the run id; the
values are JSON messages that launcher.plan.consensus validates. Bounds, documented in docs/multinode.md:
- a node that cannot reach node 0's store at start gives up after `connect_timeout`;
- while training, each node checks the store every POLL_SECONDS: if node 0's safe-sft is gone, the
  check fails at once (the connection closes) and the node stops its training and exits with an error;
- node 0 waits `report_timeout` for every node's report of an attempt, then stops the job;
- a node waits `report_timeout` + DECISION_SLACK for node 0's decision, then exits with an error.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import timedelta
from typing import Any

from launcher.errors import SafeSftError
from launcher.plan.consensus import Decision, NodeReport, decode_decision, decode_report, encode
from launcher.run.poll import wait_until

POLL_SECONDS = 1.0
DECISION_SLACK = 60.0


class CoordinationLost(SafeSftError):
    """Node 0's safe-sft (the store) is unreachable or a node never answered."""


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
    ) -> None:
        from torch.distributed import TCPStore  # type: ignore[attr-defined]  # only here: loads torch

        self.node, self.nnodes, self.run_id = node, nnodes, run_id
        self.report_timeout = report_timeout
        self.sleep = sleep
        self.where = f"{host}:{port}"
        try:
            self.store: Any = TCPStore(
                host, port, is_master=node == 0, timeout=timedelta(seconds=connect_timeout), wait_for_workers=False
            )
        except Exception as err:
            raise CoordinationLost(
                f"cannot {'open' if node == 0 else 'reach'} the coordination store at {self.where}: {err}",
                "start node 0's safe-sft first, check MASTER_ADDR and that the port is free (--coord-port)",
            ) from None
        self.last_check = 0.0
        self.departed: set[int] = set()

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

    def _wait_for(self, key: str, timeout: float) -> bool:
        return wait_until(lambda: self._check(key), timeout, sleep=self.sleep)

    def exchange(
        self,
        attempt: int,
        report: NodeReport,
        decide: Callable[[list[NodeReport]], Decision],
    ) -> Decision:
        """Publish this node's report; node 0 decides from all of them; every node returns that decision."""
        self._set(self._key(attempt, f"report-{self.node}"), encode(report))
        if self.node == 0:
            reports = []
            for node in range(self.nnodes):
                key = self._key(attempt, f"report-{node}")
                if self._wait_for(key, self.report_timeout):
                    reports.append(decode_report(self._get(key), self.run_id, attempt, self.nnodes))
            self.departed = {r.node for r in reports if r.kind == "interrupted"}
            self._set(self._key(attempt, "decision"), encode(decide(reports)))
        key = self._key(attempt, "decision")
        if not self._wait_for(key, self.report_timeout + DECISION_SLACK):
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
            if node not in self.departed:  # an interrupted node reported and left without waiting
                self._wait_for(self._key(attempt, f"ack-{node}"), timeout)

    # ---- the shared output dir ---------------------------------------------------------------------

    def publish_token(self, token: str) -> None:
        self._set(f"safe-sft/{self.run_id}/shared-token", token)

    def read_token(self) -> str:
        key = f"safe-sft/{self.run_id}/shared-token"
        if not self._wait_for(key, self.report_timeout):
            raise CoordinationLost("node 0 never published its shared-filesystem token", "see node 0's terminal")
        return self._get(key)
