"""Node 0's waits for the other nodes' reports, on a real store (torch's TCPStore on this host, no peers)."""

from __future__ import annotations

import socket
import time

from launcher.plan.consensus import Decision, NodeReport
from launcher.run.coord import Coordinator


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_node_0_waits_for_a_gone_peers_report_only_as_long_as_it_is_told() -> None:
    """Node 0, interrupted while node 1 was gone, had waited the whole --node-timeout (300 s) for node 1's
    report before it stopped (hostile43mn F3): the wait for the reports is one deadline, as short as asked."""
    seen: list[list[int]] = []

    def decide(reports: list[NodeReport]) -> Decision:
        seen.append([r.node for r in reports])
        return Decision("run", 1, "stop", "interrupted", 0, "interrupted")

    node0 = Coordinator(host="127.0.0.1", port=free_port(), node=0, nnodes=2, run_id="run", report_timeout=300.0,
                        say=lambda _: None)  # fmt: skip
    report = NodeReport("run", 1, 0, "interrupted", -2, ("safe-sft received SIGTERM",), ())
    start = time.monotonic()
    decision = node0.exchange(1, report, decide, report_timeout=1.0)
    assert time.monotonic() - start < 10
    assert decision.action == "stop" and seen == [[0]] and node0.silent == {1}
