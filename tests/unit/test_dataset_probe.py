"""The dataset sampler on real-shaped files: each layout swift reads, scripts, media, `#N`, bad rows, bounds."""

from __future__ import annotations

import csv
import json
import os
import random
import time
from pathlib import Path

import pytest

from launcher.errors import SafeSftError
from launcher.model import RowText, SampleStatus
from launcher.prepare import check_dataset_files
from launcher.probe.dataset import (
    LINE_LIMIT,
    MAX_BYTES,
    MAX_ROWS,
    chars,
    parse_spec,
    probe_dataset,
    probe_datasets,
    row_text,
)


def write_jsonl(path: Path, rows: list[object]) -> Path:
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
    return path


def answer(latin: int, digits: int = 0, turns: int = 1) -> RowText:
    """The assistant's turns of a row: what swift trains on."""
    return RowText(latin, 0, digits, 0, turns)


LAYOUTS = [
    pytest.param(
        {"messages": [{"role": "user", "content": "abcd"}, {"role": "assistant", "content": "efgh"}]},
        RowText(8, 0, 0, 0, 2, labels=answer(4)),
        id="messages",
    ),
    pytest.param(
        {"conversations": [{"from": "human", "value": "abcd"}, {"from": "gpt", "value": "efgh"}]},
        RowText(8, 0, 0, 0, 2, labels=answer(4)),
        id="sharegpt-from-value",
    ),
    pytest.param(
        {"conversation": [{"human": "abcd", "assistant": "efgh"}, {"human": "ij", "assistant": "kl"}]},
        RowText(12, 0, 0, 0, 4, labels=answer(6, turns=2)),
        id="sharegpt-pairs",
    ),
    pytest.param(
        {"system": "sys", "query": "abcd", "response": "efgh", "history": [["q1", "r1"]]},
        RowText(3 + 8 + 2, 0, 2, 0, 5, labels=answer(5, digits=1, turns=2), system=True),
        id="query-response-history",
    ),
    pytest.param(
        {"instruction": "abcd", "input": "ef", "output": "ghij"},
        RowText(4 + 1 + 2 + 4, 0, 0, 0, 2, labels=answer(4)),  # swift joins instruction and input with a newline
        id="alpaca",
    ),
    pytest.param(
        {"prompt": "ab", "completion": "cd"}, RowText(4, 0, 0, 0, 2, labels=answer(2)), id="prompt-completion"
    ),
    pytest.param(
        {
            "messages": [{"role": "user", "content": "<image>ab"}, {"role": "assistant", "content": "cd"}],
            "images": ["a.jpg", "b.jpg"],
        },
        RowText(11, 0, 0, 0, 2, images=2, labels=answer(2)),
        id="messages-images",
    ),
    pytest.param(
        {"query": "ab", "response": "cd", "image": "a.jpg"},
        RowText(4, 0, 0, 0, 2, images=1, labels=answer(2)),
        id="single-image",
    ),
    pytest.param(
        {
            "messages": [
                {
                    "role": "user",
                    "content": [{"type": "text", "text": "ab"}, {"type": "image_url", "image_url": {"url": "x"}}],
                },
                {"role": "assistant", "content": "cd"},
            ]
        },
        RowText(4, 0, 0, 0, 2, images=1, labels=answer(2)),
        id="openai-content-blocks",
    ),
    pytest.param(
        {
            "messages": [{"role": "user", "content": "<video>"}, {"role": "assistant", "content": "ab"}],
            "videos": ["v.mp4"],
        },
        RowText(9, 0, 0, 0, 2, other_media=True, labels=answer(2)),
        id="video",
    ),
    pytest.param(
        {"messages": json.dumps([{"role": "user", "content": "ab"}, {"role": "assistant", "content": "cd"}])},
        RowText(4, 0, 0, 0, 2, labels=answer(2)),
        id="messages-as-json-string",
    ),
]


@pytest.mark.parametrize(
    ("row", "own"),
    [
        ({"messages": [{"role": "system", "content": "s"}, {"role": "user", "content": "q"}]}, True),
        ({"conversations": [{"from": "system", "value": "s"}, {"from": "human", "value": "q"}]}, True),
        ({"system": "s", "query": "q", "response": "r"}, True),
        ({"messages": [{"role": "user", "content": "q"}, {"role": "assistant", "content": "r"}]}, False),
        ({"system": "", "query": "q", "response": "r"}, True),  # empty: swift writes no default in its place
        ({"system": None, "query": "q", "response": "r"}, False),
    ],
)
def test_a_rows_own_system_prompt_is_noted(row: dict[str, object], own: bool) -> None:
    assert row_text(row).system is own


@pytest.mark.parametrize(("row", "expected"), LAYOUTS)
def test_each_layout_swift_reads(row: dict[str, object], expected: RowText) -> None:
    assert row_text(row) == expected


def test_scripts_are_counted_apart() -> None:
    assert chars("Hello, world 42") == (13, 0, 2, 0)
    assert chars("你好，世界") == (0, 5, 0, 0)  # the full-width comma is a wide character too
    assert chars("Привет мир") == (1, 0, 0, 9)  # the space is ASCII
    assert chars("こんにちは 안녕 😀") == (2, 8, 0, 0)


def test_cjk_text_is_far_more_tokens_than_latin_of_the_same_characters(tmp_path: Path) -> None:
    from launcher.plan.data_lengths import row_tokens

    latin = row_text({"query": "a" * 400, "response": "b" * 400})
    chinese = row_text({"query": "中" * 400, "response": "文" * 400})
    assert row_tokens(chinese, 0) - row_tokens(latin, 0) == 800 - 200  # 1 token a character against 4 a token


def test_jsonl_json_list_csv_and_txt_files(tmp_path: Path) -> None:
    turns = [({"role": "user", "content": f"q{i}"}, {"role": "assistant", "content": "a" * i}) for i in range(50)]
    rows = [{"messages": list(pair)} for pair in turns]
    write_jsonl(tmp_path / "d.jsonl", rows)
    (tmp_path / "d.json").write_text(json.dumps(rows))
    with (tmp_path / "d.csv").open("w", newline="") as handle:
        writer = csv.DictWriter(handle, ["query", "response"])
        writer.writeheader()
        writer.writerows({"query": f"q{i}", "response": "a" * i} for i in range(50))
    (tmp_path / "d.txt").write_text("".join("a" * i + "\n" for i in range(1, 51)))
    for name in ("d.jsonl", "d.json", "d.csv", "d.txt"):
        sample = probe_dataset(name, tmp_path)
        assert sample.status is SampleStatus.SAMPLED, (name, sample.note)
        assert len(sample.rows) == 50 and sample.rows_in_file == 50 and sample.rows_in_file_exact, name
        assert max(r.latin for r in sample.rows) >= 49, name


def test_jsonl_content_in_a_json_suffix_and_a_list_in_jsonl(tmp_path: Path) -> None:
    rows = [{"query": "q", "response": "r"}] * 3
    write_jsonl(tmp_path / "lines.json", rows)  # `datasets`' json builder reads JSON lines under .json too
    (tmp_path / "list.jsonl").write_text(json.dumps(rows))
    assert len(probe_dataset("lines.json", tmp_path).rows) == 3
    assert len(probe_dataset("list.jsonl", tmp_path).rows) == 3


def test_sample_count_and_hub_ids(tmp_path: Path) -> None:
    write_jsonl(tmp_path / "d.jsonl", [{"query": "q", "response": "r"}] * 4)
    assert parse_spec("d.jsonl#2", tmp_path) == (tmp_path / "d.jsonl", 2)
    assert parse_spec("hf::d.jsonl#7", tmp_path) == (tmp_path / "d.jsonl", 7)
    sample = probe_dataset("d.jsonl#500", tmp_path)
    assert sample.status is SampleStatus.SAMPLED and sample.take == 500
    hub = probe_dataset("AI-ModelScope/alpaca-gpt4-data-zh#500", tmp_path)
    assert hub.status is SampleStatus.NOT_LOCAL and hub.take == 500
    assert hub.note == "not sampled, not a local file"
    assert probe_dataset("swift/self-cognition:zh", tmp_path).status is SampleStatus.NOT_LOCAL
    missing = probe_dataset("typo.jsonl", tmp_path)
    assert missing.status is SampleStatus.NOT_READ and "no such file" in missing.note and missing.missing
    assert not hub.missing and not sample.missing
    named_hub = probe_dataset("ms::owner/typo.jsonl", tmp_path)  # the user said it is a hub id
    assert named_hub.status is SampleStatus.NOT_LOCAL and not named_hub.missing


def test_malformed_rows_are_counted_and_skipped(tmp_path: Path) -> None:
    good = json.dumps({"query": "q", "response": "r"})
    lines = [good, "{not json", "[1, 2]", json.dumps({"messages": "plain text"}), json.dumps({"id": 3}), good]
    (tmp_path / "d.jsonl").write_text("\n".join(lines) + "\n")
    sample = probe_dataset("d.jsonl", tmp_path)
    assert (len(sample.rows), sample.malformed, sample.rows_in_file) == (2, 4, 2)


@pytest.mark.parametrize(
    ("name", "content", "empty"),
    [
        pytest.param("e.jsonl", b"", True, id="no-bytes"),
        pytest.param("b.jsonl", b"\n  \n\t\n", True, id="blank-lines"),
        pytest.param("e.csv", b"", True, id="empty-csv"),
        pytest.param("e.json", b" \n", True, id="blank-json"),
        pytest.param("one.jsonl", b'\n{"query": "q", "response": "r"}\n', False, id="one-row"),
        pytest.param("list.json", b"[]", True, id="an-empty-list"),
        pytest.param("list.jsonl", b"[]", True, id="an-empty-list-named-jsonl"),
        pytest.param("rows.json", b"[{}]", False, id="a-list-of-an-unreadable-row-is-not-empty"),
    ],
)
def test_a_file_of_nothing_but_whitespace_or_an_empty_list_is_marked_empty(
    tmp_path: Path, name: str, content: bytes, empty: bool
) -> None:
    (tmp_path / name).write_bytes(content)
    sample = probe_dataset(name, tmp_path)
    assert sample.empty is empty
    assert (sample.status is SampleStatus.SAMPLED) is (name == "one.jsonl")


def test_a_json_list_that_breaks_off_counts_the_rest_malformed(tmp_path: Path) -> None:
    (tmp_path / "d.json").write_text('[{"query": "q", "response": "r"}, {"query": "q", "respo')
    sample = probe_dataset("d.json", tmp_path)
    assert (len(sample.rows), sample.malformed) == (1, 1)


def test_a_directory_a_fifo_and_an_unreadable_file_are_one_warning_each(tmp_path: Path) -> None:
    (tmp_path / "repo").mkdir()
    os.mkfifo(tmp_path / "pipe.jsonl")  # opening it would block forever
    (tmp_path / "eio.jsonl").symlink_to("/proc/self/mem")  # open works, read fails with EIO
    (tmp_path / "garbage.jsonl").write_bytes(bytes(range(256)) * 40)
    (tmp_path / "d.parquet").write_bytes(b"PAR1")
    specs = ["repo", "pipe.jsonl", "eio.jsonl", "garbage.jsonl", "d.parquet"]
    start = time.monotonic()
    facts = probe_datasets(specs, tmp_path)
    assert time.monotonic() - start < 5
    assert [d.status for d in facts.datasets] == [SampleStatus.NOT_READ] * 5
    assert len(facts.warnings) == 5 and all("\n" not in w for w in facts.warnings)
    notes = [d.note for d in facts.datasets]
    assert "directory" in notes[0] and "not a regular file" in notes[1] and "cannot read" in notes[2]
    assert "no row swift reads" in notes[3] and ".parquet" in notes[4]


def test_a_huge_file_is_read_in_bounded_windows_spread_over_it(tmp_path: Path) -> None:
    # sorted by length, as files often are: only windows over the whole file see the long tail at its end
    rng = random.Random(0)
    lengths = sorted(int(rng.lognormvariate(5, 1)) for _ in range(150_000))
    rows = [{"query": "q", "response": "a" * n} for n in lengths]
    path = write_jsonl(tmp_path / "big.jsonl", rows)
    size = path.stat().st_size
    assert size > 8 * MAX_BYTES
    start = time.monotonic()
    sample = probe_dataset("big.jsonl", tmp_path)
    elapsed = time.monotonic() - start
    assert sample.bytes_read <= MAX_BYTES + LINE_LIMIT
    assert len(sample.rows) <= MAX_ROWS
    assert sample.rows_in_file is not None and not sample.rows_in_file_exact
    assert abs(sample.rows_in_file - 150_000) < 0.25 * 150_000  # windows of a sorted file vary in row size
    sampled_max = max(r.latin for r in sample.rows)
    assert sampled_max > lengths[int(0.99 * len(lengths))]  # the tail at the file's end was seen
    assert elapsed < 2.0  # about 30 ms of CPU; the margin is for a loaded machine


def test_a_row_over_the_read_limit_counts_as_too_long(tmp_path: Path) -> None:
    short = json.dumps({"query": "q", "response": "r"})
    huge = json.dumps({"query": "q", "response": "x" * (LINE_LIMIT + 10)})
    # the first window starts at the huge row; a later one starts inside the second and skips its rest
    lines = [huge] + [short] * 30_000 + [huge] + [short] * 30_000
    (tmp_path / "d.jsonl").write_text("\n".join(lines) + "\n")
    sample = probe_dataset("d.jsonl", tmp_path, budget=256 * 1024)
    assert sample.too_long == 1 and sample.status is SampleStatus.SAMPLED
    assert all(r.latin < 100 for r in sample.rows)  # only short rows were parsed
    assert sample.bytes_read <= 256 * 1024 + 2 * LINE_LIMIT


def test_several_datasets_share_the_byte_budget(tmp_path: Path) -> None:
    for name in ("a", "b", "c", "d"):
        write_jsonl(tmp_path / f"{name}.jsonl", [{"query": "q" * 500, "response": "r" * 500}] * 20_000)
    facts = probe_datasets([f"{n}.jsonl" for n in "abcd"], tmp_path)
    assert sum(d.bytes_read for d in facts.datasets) <= 8 * 1024 * 1024 + 4 * LINE_LIMIT
    assert all(d.status is SampleStatus.SAMPLED for d in facts.datasets)


def test_a_url_with_credentials_is_masked(tmp_path: Path) -> None:
    sample = probe_dataset("https://user:pw@host/d.jsonl", tmp_path)
    assert sample.status is SampleStatus.NOT_LOCAL and "pw" not in sample.spec


def test_a_utf8_bom_before_lines_is_read_and_before_a_list_is_what_swift_cannot_read(tmp_path: Path) -> None:
    """swift reads JSON Lines and csv after a UTF-8 BOM; a JSON list after one stops its loader (pyarrow,
    then pandas: "Expected object or value"), as it does a file in UTF-16 or UTF-32: the run refuses."""
    row = b'{"query": "a", "response": "b"}'
    (tmp_path / "l.jsonl").write_bytes(b"\xef\xbb\xbf" + row + b"\n" + row + b"\n")
    (tmp_path / "l.json").write_bytes(b"\xef\xbb\xbf" + row + b"\n")
    (tmp_path / "j.json").write_bytes(b'\xef\xbb\xbf[{"query": "a", "response": "b"}]')
    (tmp_path / "e.json").write_bytes(b"\xef\xbb\xbf [ ]\n")
    (tmp_path / "w.jsonl").write_bytes(("\ufeff" + row.decode() + "\n").encode("utf-16-le"))
    (tmp_path / "w.csv").write_bytes("\ufeffquery,response\na,b\n".encode("utf-16-be"))
    (tmp_path / "w32.jsonl").write_bytes(("\ufeff" + row.decode() + "\n").encode("utf-32-le"))
    assert len(probe_dataset("l.jsonl", tmp_path).rows) == 2 and len(probe_dataset("l.json", tmp_path).rows) == 1
    names = ("j.json", "e.json", "w.jsonl", "w.csv", "w32.jsonl")
    assert [probe_dataset(name, tmp_path).encoding for name in names] == [
        "UTF-8 with BOM", "UTF-8 with BOM", "UTF-16", "UTF-16", "UTF-32",
    ]  # fmt: skip
    with pytest.raises(SafeSftError) as err:
        check_dataset_files(probe_datasets(["l.jsonl", "w.jsonl"], tmp_path))
    assert err.value.message == (
        "--dataset 'w.jsonl' is UTF-16 text (it starts with a UTF-16 byte-order mark), which swift's loader cannot "
        "read: it stops on the whole file after the model has loaded"
    )
    assert err.value.hint == f"save it as UTF-8: iconv -f UTF-16 -t UTF-8 {tmp_path / 'w.jsonl'} > " + (
        f"{tmp_path / 'w.utf8.jsonl'}, and give that"
    )
    with pytest.raises(SafeSftError) as err:
        check_dataset_files(probe_datasets(["j.json"], tmp_path))
    assert err.value.hint.startswith("save it without the byte-order mark (sed -i")


def test_swift_columns_rename_before_the_row_is_read(tmp_path: Path) -> None:
    write_jsonl(tmp_path / "d.jsonl", [{"src": "abcd", "tgt": "ef"}] * 3)
    assert probe_datasets(["d.jsonl"], tmp_path).datasets[0].status is SampleStatus.NOT_READ
    facts = probe_datasets(["d.jsonl"], tmp_path, '{"src": "query", "tgt": "response"}')
    assert facts.datasets[0].rows[0] == RowText(6, 0, 0, 0, 2, labels=answer(2))
    assert probe_datasets(["d.jsonl"], tmp_path, "{not json").datasets[0].status is SampleStatus.NOT_READ
    quoted = probe_datasets(["d.jsonl"], tmp_path, "{'src': 'query', 'tgt': 'response'}")  # swift repairs it
    assert quoted.datasets[0].rows == facts.datasets[0].rows
    (tmp_path / "columns.json").write_text('{"src": "query", "tgt": "response"}')  # swift reads a file it names
    assert probe_datasets(["d.jsonl"], tmp_path, "columns.json").datasets[0].rows == facts.datasets[0].rows
    long = json.dumps({"src": "query", "tgt": "response", **{f"unused_{i}": f"x{i}" for i in range(40)}})
    assert probe_datasets(["d.jsonl"], tmp_path, long).datasets[0].rows == facts.datasets[0].rows  # no file name


@pytest.mark.parametrize("tail", ["abc", "", "1e3", "ten", "1.5"])
def test_a_sample_count_swift_cannot_read_is_one_line(tmp_path: Path, tail: str) -> None:
    """swift's DatasetSyntax.parse does int() on what follows the last #: each of these stops every rank."""
    from launcher.errors import SafeSftError
    from launcher.probe.dataset import check_sample_count

    (tmp_path / "data.jsonl").write_text('{"messages": []}\n')
    for spec in (f"data.jsonl#{tail}", f"AI-ModelScope/alpaca-gpt4-data-zh#{tail}", f"hf::org/set#{tail}"):
        with pytest.raises(SafeSftError) as err:
            check_sample_count(spec, tmp_path)
        assert err.value.message == f"--dataset {spec!r}: {tail!r} after its last # is not a whole number of samples"


@pytest.mark.parametrize("tail", ["0", "-1", "-500"])
def test_a_sample_count_below_one_is_one_line(tmp_path: Path, tail: str) -> None:
    """swift reads `#0` and `#-1` as counts and asserts dataset_sample > 0 once the model has loaded (a bare
    AssertionError); the plan had sampled `#0` whole and called `#-1` no local file (hostile47data F7)."""
    from launcher.errors import SafeSftError
    from launcher.probe.dataset import check_sample_count, probe_datasets

    (tmp_path / "data.jsonl").write_text('{"messages": [{"role": "user", "content": "hi"}]}\n')
    with pytest.raises(SafeSftError) as err:
        check_sample_count(f"data.jsonl#{tail}", tmp_path)
    assert err.value.message == f"--dataset 'data.jsonl#{tail}': #{tail} takes no samples"
    assert probe_datasets([f"data.jsonl#{tail}"], tmp_path).datasets[0].status is not SampleStatus.NOT_READ


@pytest.mark.parametrize("spec", ["data.jsonl", "data.jsonl#500", "data.jsonl# 5", "org/set#10", "odd#name.jsonl", "x"])
def test_a_sample_count_swift_reads_or_a_file_that_exists_passes(tmp_path: Path, spec: str) -> None:
    from launcher.probe.dataset import check_sample_count

    (tmp_path / "data.jsonl").write_text('{"messages": []}\n')
    (tmp_path / "odd#name.jsonl").write_text('{"messages": []}\n')  # swift takes an existing path whole
    check_sample_count(spec, tmp_path)


def test_a_line_that_is_not_json_is_named_and_a_row_swift_cannot_map_is_only_counted(tmp_path: Path) -> None:
    """datasets' json builder stops on the whole file at a line that does not parse; a row of another layout
    is swift's preprocessor's to skip."""
    from launcher.probe.dataset import probe_dataset

    good = '{"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}]}'
    path = tmp_path / "d.jsonl"
    path.write_text("\n".join([good, '{"no_messages": 1}', good]) + "\n")
    mapped = probe_dataset(str(path), tmp_path)
    assert (mapped.malformed, mapped.not_json) == (1, None)
    path.write_text("\n".join([good, "{'single': 'quotes'}", good, "{bad"]) + "\n")
    broken = probe_dataset(str(path), tmp_path)
    assert broken.malformed == 2
    assert (
        broken.not_json == "\"{'single': 'quotes'}\" (Expecting property name enclosed in double quotes at character 2)"
    )


def test_tools_are_counted_as_the_json_the_template_writes() -> None:
    """Keys and punctuation included (glaive's layout: a JSON string); a row without tools has none."""
    tools = '[{"name": "get_weather", "parameters": {"type": "object"}}]'
    row = {"conversations": [{"from": "human", "value": "Hi"}, {"from": "gpt", "value": "Hello"}], "tools": tools}
    with_tools = row_text(row)
    without = row_text({"conversations": row["conversations"]})
    assert with_tools.tools and not without.tools
    counted = sum(
        (with_tools.latin - without.latin, with_tools.digits - without.digits, with_tools.other - without.other)
    )
    assert counted == len(tools)


@pytest.mark.parametrize(("line", "kind"), [("[1, 2, 3]", "array"), ('"plain text"', "string"), ("null", "null")])
def test_a_line_that_is_json_but_no_object_stops_the_file_as_a_broken_line_does(
    tmp_path: Path, line: str, kind: str
) -> None:
    """datasets' json builder (pyarrow) stops on the whole file at a line whose JSON is no object ("Column()
    changed from object to array"), after the model has loaded: the run refuses it as it does a broken line."""
    good = json.dumps({"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}]})
    (tmp_path / "d.jsonl").write_text("\n".join([good, line, good]) + "\n")
    sample = probe_dataset("d.jsonl", tmp_path)
    assert (len(sample.rows), sample.malformed) == (2, 1)
    assert sample.not_json == f"{line!r} (a JSON {kind}, not an object)"


def test_a_broken_line_is_quoted_where_it_breaks_and_bytes_not_utf8_are_named_as_that(tmp_path: Path) -> None:
    """Its start, which every line of a file shares, named nothing, and JSON's `line 1 column 41` read as the
    file's line 1; bytes that are not UTF-8 were called `not a JSON object` (hostile47data F9, F10)."""
    prefix = '{"messages": [{"role": "user", "content": "' + "x" * 80
    path = tmp_path / "d.jsonl"
    path.write_bytes((prefix + '"}, {"role" "assistant"}]}\n').encode())
    said = probe_dataset(str(path), tmp_path).not_json
    assert said is not None and said.startswith("'...xxx") and '{"role" "assistant"}' in said
    assert said.endswith("(Expecting ':' delimiter at character 136)")  # 124 + len('"}, {"role"') + 1
    path.write_bytes(b'{"messages": [{"role": "user", "content": "caf\xe9"}]}\n')
    said = probe_dataset(str(path), tmp_path).not_json
    assert said is not None and said.endswith("(byte 0xe9 at byte 47 is not UTF-8: invalid continuation byte)")


def test_an_empty_val_dataset_is_told_to_leave_val_dataset_not_dataset(tmp_path: Path) -> None:
    """The refusal of an empty --val_dataset said to leave it out of --dataset (hostile47data F13)."""
    from launcher.errors import SafeSftError
    from launcher.prepare import check_dataset_files
    from launcher.probe.dataset import probe_datasets

    (tmp_path / "val.jsonl").write_text("\n \n")
    with pytest.raises(SafeSftError) as err:
        check_dataset_files(probe_datasets(["val.jsonl"], tmp_path), "--val_dataset")
    assert err.value.hint == "give a file with rows, or leave it out of --val_dataset"
