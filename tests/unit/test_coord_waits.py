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


def test_a_node_that_stops_before_it_checks_in_stops_node_0_at_once_with_its_reason() -> None:
    """Node 1 given another --output_dir stopped at once with a clear line; node 0 had waited --node-timeout
    (300 s) for it 'to start safe-sft' and then blamed a node that never started (hostile43mn F1)."""
    import threading

    import pytest

    from launcher.run.coord import CoordinationLost

    port = free_port()
    node0 = Coordinator(host="127.0.0.1", port=port, node=0, nnodes=2, run_id="run", report_timeout=300.0,
                        say=lambda _: None)  # fmt: skip
    why = "the output dir /b/out is not the one node 0 writes to (/b/out/safe-sft/shared-run.token is missing)"

    def node1_leaves() -> None:
        node1 = Coordinator(host="127.0.0.1", port=port, node=1, nnodes=2, run_id="run", say=lambda _: None)
        node1.leave(why)

    peer = threading.Thread(target=node1_leaves)
    peer.start()
    start = time.monotonic()
    with pytest.raises(CoordinationLost) as err:
        node0.gather({"--model": "m"})
    peer.join()
    assert time.monotonic() - start < 20
    assert err.value.message == f"node 1 stopped before training: {why}"
    assert err.value.hint == "see node 1's terminal"


def _silent_listener() -> tuple[socket.socket, int]:
    """A program at the port that takes connections and never answers (an HTTP server waiting for a line)."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    return listener, int(listener.getsockname()[1])


def test_a_node_whose_store_port_is_another_programs_gives_up_in_node_timeout_with_one_line() -> None:
    """Node 0's MASTER_PORT + 1 held by another program: torch's handshake there waited forever, past
    --node-timeout and deaf to SIGTERM and Ctrl-C (hostile46mn F2)."""
    import pytest

    from launcher.run.coord import CoordinationLost

    listener, port = _silent_listener()
    with listener:
        start = time.monotonic()
        with pytest.raises(CoordinationLost) as err:
            Coordinator(host="127.0.0.1", port=port, node=1, nnodes=2, run_id="run", connect_timeout=1.0,
                        say=lambda _: None)  # fmt: skip
        assert time.monotonic() - start < 10
    assert "accepts connections, but no coordination store answered within 2 s" in err.value.message


def test_a_signal_ends_the_wait_for_a_store_that_never_answers() -> None:
    import signal

    import pytest

    from launcher.run.poll import WaitInterrupted

    listener, port = _silent_listener()
    start = time.monotonic()
    signalled = lambda: (1, int(signal.SIGTERM)) if time.monotonic() - start > 1 else (0, None)  # noqa: E731
    with listener, pytest.raises(WaitInterrupted):
        Coordinator(host="127.0.0.1", port=port, node=1, nnodes=2, run_id="run", connect_timeout=5.0,
                    signals=signalled, say=lambda _: None)  # fmt: skip
    assert time.monotonic() - start < 10
