"""What an attempt left behind, read whatever shape it has: the supervisor reads these files after every
failure, and `safe-sft explain DIR` reads them from a user's copy, so a file of another shape gives what it
holds, never an exception."""

from __future__ import annotations

from pathlib import Path

import pytest

from launcher.run.evidence import last_logged_step, read_error_files

RECORDED = '{"message": {"message": "OOM", "extraInfo": {"py_callstack": "Traceback", "timestamp": "1700000000"}}}'


@pytest.mark.parametrize(
    ("rank_dir", "text", "message", "rank", "timestamp"),
    [
        pytest.param("1", RECORDED, "Traceback\nOOM", 3, 1700000000, id="torchelastic-schema"),
        pytest.param("1", "[1, 2]", "[1, 2]", 3, None, id="a-list"),
        pytest.param("1", '{"message": "plain"}', "plain", 3, None, id="message-a-string"),
        pytest.param("1", '{"message": {"message": "x", "extraInfo": "s"}}', "x", 3, None, id="extra-info-a-string"),
        pytest.param("1", '{"message": {"message": "x", "extraInfo": {"timestamp": "²"}}}', "x", 3, None, id="stamp-²"),
        pytest.param("²", '{"message": "x"}', "x", None, None, id="rank-dir-not-ascii"),
        pytest.param("1", '{"error": "x"}', "{'error': 'x'}", 3, None, id="another-schema"),
        pytest.param("1", "7", "7", 3, None, id="a-number"),
    ],
)
def test_an_error_file_of_any_shape_gives_its_text(
    tmp_path: Path, rank_dir: str, text: str, message: str, rank: int | None, timestamp: int | None
) -> None:
    folder = tmp_path / "attempt_0" / rank_dir
    folder.mkdir(parents=True)
    (folder / "error.json").write_text(text)
    (failure,) = read_error_files(tmp_path, node_rank=1, nproc_per_node=2)
    assert (failure.message, failure.rank, failure.timestamp) == (message, rank, timestamp)


@pytest.mark.parametrize("text", ["", "{", "[" * 100_000 + "]" * 100_000, "\xff\xfe"])
def test_an_error_file_that_is_not_json_is_skipped(tmp_path: Path, text: str) -> None:
    (tmp_path / "0").mkdir()
    (tmp_path / "0" / "error.json").write_text(text, encoding="latin-1")
    assert read_error_files(tmp_path, node_rank=0, nproc_per_node=1) == ()


@pytest.mark.parametrize(
    ("lines", "step"),
    [
        pytest.param(['{"global_step/max_steps": "4/8"}'], 4, id="swift's-line"),
        pytest.param(['{"global_step/max_steps": "4/8"}', "[1, 2]"], 4, id="a-list-after-it"),
        pytest.param(['{"global_step/max_steps": "4/8"}', '{"global_step/max_steps": "abc/8"}'], 4, id="no-number"),
        pytest.param(['{"global_step/max_steps": "²/8"}'], None, id="not-ascii"),
        pytest.param(['{"global_step/max_steps": 4}', "null", "[" * 100_000], None, id="nothing-to-read"),
    ],
)
def test_the_last_logged_step_skips_lines_of_another_shape(tmp_path: Path, lines: list[str], step: int | None) -> None:
    (tmp_path / "logging.jsonl").write_text("\n".join(lines) + "\n")
    assert last_logged_step(tmp_path) == step
