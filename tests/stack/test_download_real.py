"""A hub that cannot be reached, on the real stack: real swift sft asks huggingface_hub for a model id.

The hub is a real endpoint on this machine: a port nobody listens on (the connection is refused, as it is
for a node without internet behind a firewall), or a real HTTP server that answers 503 to everything (a
hub under maintenance). The model id is never downloaded; safe-sft must name the failure `download`, retry
the same settings after its waits, and end with what to do, leaving the output dir as swift would.
"""

from __future__ import annotations

import http.server
import json
import os
import socket
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.stack.test_supervise_real import report, safe_sft

HUB_MODEL = "Qwen/Qwen2.5-0.5B-Instruct"


def _hub_env(tmp: Path, endpoint: str) -> dict[str, str]:
    env = {**os.environ, "USE_HF": "1", "HF_ENDPOINT": endpoint, "HF_HOME": str(tmp / "hf"), "NPROC_PER_NODE": "1"}
    env.pop("HF_HUB_OFFLINE", None)
    return env


def _args(tiny: dict[str, object], out: Path) -> list[str]:
    return ["--model", HUB_MODEL, "--dataset", str(tiny["dataset"]), "--use_cpu", "true", "--output_dir", str(out)]


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class _Unavailable(http.server.BaseHTTPRequestHandler):
    def _answer(self) -> None:
        self.send_response(503)
        self.send_header("Content-Length", "0")
        self.end_headers()

    do_GET = do_HEAD = _answer

    def log_message(self, *args: object) -> None:
        self.server.requests += 1  # type: ignore[attr-defined]


@pytest.fixture
def hub_in_maintenance() -> Iterator[http.server.ThreadingHTTPServer]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Unavailable)
    server.requests = 0  # type: ignore[attr-defined]
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()


def test_a_refused_hub_is_retried_after_growing_waits_then_ends_with_the_fix(tiny, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    out = tmp_path / "out"
    endpoint = f"http://127.0.0.1:{_closed_port()}"
    result = safe_sft(["--download-wait", "1", *_args(tiny, out)], _hub_env(tmp_path, endpoint), timeout=400)
    assert result.returncode == 1, result.stderr[-3000:]
    assert "safe-sft: waiting 1 s before attempt 2: download failed" in result.stderr
    assert "safe-sft: waiting 4 s before attempt 3: download failed" in result.stderr
    summary = result.stderr[result.stderr.index("safe-sft: failed after 3 attempt(s)") :]
    assert "root cause (attempt 1): download:" in summary
    gave_up = next(line for line in summary.splitlines() if "gave up:" in line)
    assert "a download failed in 3 attempts" in gave_up and f"HF_ENDPOINT={endpoint}" in gave_up
    assert "launcher/cli.py" not in result.stderr and "launcher/run/" not in result.stderr  # no safe-sft traceback
    data = report(out)
    assert [a["failure"]["kind"] for a in data["attempts"]] == ["download"] * 3
    assert [a["change"]["what"] for a in data["attempts"][1:]] == ["no change", "no change"]
    assert sorted(p.name for p in out.iterdir()) == ["safe-sft"]  # nothing of swift's was written


def test_a_hub_answering_503_is_a_download_failure(tiny, tmp_path: Path, hub_in_maintenance) -> None:  # type: ignore[no-untyped-def]
    out = tmp_path / "out"
    endpoint = f"http://127.0.0.1:{hub_in_maintenance.server_address[1]}"
    result = safe_sft(["--max-attempts", "1", *_args(tiny, out)], _hub_env(tmp_path, endpoint), timeout=400)
    assert result.returncode == 1, result.stderr[-3000:]
    assert hub_in_maintenance.requests > 0  # swift's hub client really asked this server
    assert "safe-sft: waiting" not in result.stderr  # no attempt follows the last one --max-attempts allows
    failure = report(out)["attempts"][0]["failure"]
    assert failure["kind"] == "download", json.dumps(failure)
    assert any("503" in line for line in failure["evidence"])
