"""A swift config file that cannot be read is one line naming the file and what is wrong, never a traceback."""

from pathlib import Path

import pytest

from launcher.errors import SafeSftError
from launcher.swift_config import load_swift_config

# "a billion laughs": 0.5 KB whose aliases expand to 9**9 values, each level nine of the one before
LAUGHS = b"a: &a [x, x, x, x, x, x, x, x, x]\n" + b"".join(
    b"%c: &%c [%s]\n" % (c, c, b", ".join([b"*%c" % (c - 1)] * 9)) for c in range(ord("b"), ord("j"))
)


@pytest.mark.parametrize(
    ("name", "content", "message"),
    [
        pytest.param("c.yaml", b"a: [1\n", "not valid YAML at line 2, column 1: expected ',' or ']'", id="yaml-open"),
        pytest.param("c.yaml", b"model: m\n\tx: 1\n", "is not valid YAML at line 2, column 1: found character '\\t'",
                     id="yaml-tab"),
        pytest.param("c.yml", b"a: *x\n", "found undefined alias 'x'", id="yaml-alias"),
        pytest.param("c.yaml", b"\x00\x00\x00", "is not valid YAML: unacceptable character #x0000", id="yaml-nul"),
        pytest.param("c.yaml", b"\xff\xfe\x89PNG", "is not text (byte 0 is not UTF-8)", id="binary"),
        pytest.param("c.json", b"{bad", "is not valid JSON (Expecting property name", id="json"),
        pytest.param("c.json", b"[1, 2]", "does not hold a mapping of arguments", id="json-list"),
        pytest.param("c.yaml", b"", "does not hold a mapping of arguments", id="empty"),
        pytest.param("c.yaml", None, "cannot read config file", id="missing"),
        pytest.param("c.json", b"[" * 100_000 + b"]" * 100_000, "nests too deep to read", id="json-deep"),
        pytest.param("c.yaml", b"a: " + b"[" * 100_000 + b"]" * 100_000, "nests too deep to read", id="yaml-deep"),
        pytest.param("c.yaml", LAUGHS, "expands to more than 100,000 values", id="billion-laughs"),
        pytest.param("c.yaml", b"# " + b"x" * (2 << 20), "is 2.0 MiB: a config of arguments is a few KiB",
                     id="megabytes"),
    ],
)  # fmt: skip
def test_a_bad_config_file_is_one_line_naming_it(
    tmp_path: Path, name: str, content: bytes | None, message: str
) -> None:
    path = tmp_path / name
    if content is not None:
        path.write_bytes(content)
    with pytest.raises(SafeSftError) as err:
        load_swift_config([str(path), "--model", "m"])
    assert err.value.message.startswith(f"config file {path} ") or err.value.message.startswith(
        f"cannot read config file {path}"
    )
    assert message in err.value.message and "\n" not in err.value.message


def test_a_config_file_that_is_a_fifo_is_one_line_not_a_hang(tmp_path: Path) -> None:
    import os

    os.mkfifo(tmp_path / "c.yaml")
    with pytest.raises(SafeSftError) as err:
        load_swift_config([str(tmp_path / "c.yaml"), "--model", "m"])
    assert err.value.message == f"config file {tmp_path / 'c.yaml'} is not a regular file"


def test_a_config_dir_named_like_a_file_is_one_line(tmp_path: Path) -> None:
    (tmp_path / "c.yaml").mkdir()
    with pytest.raises(SafeSftError, match="cannot read config file"):
        load_swift_config([str(tmp_path / "c.yaml")])
