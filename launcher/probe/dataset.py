"""Sample swift's `--dataset` files: characters by script per row, read cheaply, never a tokenizer.

Contract: `probe_datasets(specs, cwd)` reads each `--dataset` value that is a local file (swift's syntax:
`path`, `path#N`, `hf::`/`ms::` prefixes, `id:subset` for hub ids) and returns a DataFacts with, per
dataset, up to MAX_ROWS rows as RowText (characters by script, turns, images). The formats are the ones
swift's loader reads (swift/dataset/loader.py: jsonl and json through `datasets`' json builder, csv,
txt as the text builder); the layouts the ones its preprocessors map (messages/conversations with
role/content or from/value, ShareGPT user/assistant pairs, query/response/history, instruction/input/
output, with images/videos/audios). Bounded work: at most MAX_BYTES per dataset (spread over the file in
windows where its rows are lines), so a huge file costs what a small one does. A malformed row is counted
and skipped; a file that cannot be read is one warning, never an error (swift says what is wrong with it).
A file's name (`.jsonl`, `.csv`, ...) that is no file is marked `missing`: swift would take it for a hub
id and fail only after trying to download it; a file of nothing but whitespace, or a JSON file of an
empty list, is marked `empty`: the `datasets` builder swift loads it with finds no rows and stops. The
caller stops the run on either (launcher.prepare).
"""

from __future__ import annotations

import csv
import io
import json
import re
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from launcher.errors import SafeSftError
from launcher.masking import mask_value
from launcher.model import DataFacts, DatasetSample, RowText, SampleStatus
from launcher.paths import is_file
from launcher.swift_json import as_swift_repairs

MAX_ROWS = 1000  # per dataset: a p99 with 10 rows above it, in about 25 ms of parsing and counting
MAX_BYTES = 2 * 1024 * 1024  # per dataset; several datasets share TOTAL_BYTES
TOTAL_BYTES = 8 * 1024 * 1024
WINDOWS = 32  # a line file bigger than its budget is read in this many windows spread over it
LINE_LIMIT = 1024 * 1024  # a row longer than this is not parsed: it counts as max_length tokens

READ_FORMATS = {".jsonl": "lines", ".json": "json", ".csv": "csv", ".txt": "text"}
# swift loads a local file with the `datasets` loader its extension names, as written (swift/dataset/loader.py:
# jsonl and txt mapped to json and text); the loaders datasets 4 packages (datasets.packaged_modules)
SWIFT_LOADERS = {"jsonl": "json", "txt": "text"}
DATASETS_LOADERS = frozenset(
    {"arrow", "audiofolder", "csv", "eval", "hdf5", "imagefolder", "json", "lance", "niftifolder", "pandas",
     "parquet", "pdffolder", "text", "videofolder", "webdataset", "xml"}
)  # fmt: skip
UTF8_MARK = b"\xef\xbb\xbf"
# the byte-order marks of the encodings swift's loader cannot read at all (UTF-32's first: it starts as UTF-16's)
WIDE_MARKS = (
    (b"\xff\xfe\x00\x00", "UTF-32"),
    (b"\x00\x00\xfe\xff", "UTF-32"),
    (b"\xff\xfe", "UTF-16"),
    (b"\xfe\xff", "UTF-16"),
)
FILE_LIKE = re.compile(r"\.(jsonl|json|csv|txt|parquet|arrow|tsv)$", re.IGNORECASE)

MESSAGE_KEYS = ("messages", "conversations", "conversation")
ROLE_KEYS = ("role", "from")
ANSWER_ROLES = frozenset({"assistant", "gpt", "bot", "function_call", "tool_call"})  # swift trains on these turns
TURN_KEYS = frozenset({"role", "content", "from", "value"})
SHAREGPT_KEYS = ("user", "human", "assistant", "gpt", "bot")
SYSTEM_KEYS = ("system", "system_prompt")
QUERY_KEYS = ("query", "prompt", "input", "instruction", "question", "problem")
RESPONSE_KEYS = (
    "response", "answer", "output", "targets", "target", "answer_key", "answers", "solution", "text",
    "completion", "content",
)  # fmt: skip
IMAGE_KEYS = ("images", "image")
OTHER_MEDIA_KEYS = ("videos", "video", "audios", "audio")
IMAGE_BLOCKS = ("image", "image_url", "input_image")
OTHER_MEDIA_BLOCKS = ("video", "video_url", "audio", "input_audio", "audio_url")

# Characters by their UTF-8 length, counted with bytes.translate (C speed; a regex over CJK text costs
# 10 times more): 1 byte ASCII, 2 bytes accented Latin, Greek, Cyrillic, Arabic, Hebrew; 3-4 bytes CJK,
# kana, Hangul, Indic and Thai scripts, typographic punctuation, emoji.
_KEEP_ASCII = bytes(range(128, 256))  # delete these to keep the ASCII bytes
_KEEP_TWO_BYTE_LEADS = bytes(b for b in range(256) if not 0xC0 <= b <= 0xDF)
_KEEP_DIGITS = bytes(b for b in range(256) if not 0x30 <= b <= 0x39)


T = TypeVar("T")


class Malformed(ValueError):
    """A row swift would not read."""


JSON_KINDS = {list: "array", str: "string", int: "number", float: "number", bool: "boolean", type(None): "null"}


@dataclass(frozen=True)
class NotJson:
    """A line of a JSON Lines file that is no JSON object (it does not parse, or it is an array, a string):
    swift's loader (datasets' json builder) stops on the whole file there, where a row it cannot map is only
    skipped."""

    line: bytes
    error: ValueError

    def describe(self) -> str:
        """The line around where it breaks (its start is the part every line of a file shares), and why, with the
        place counted in the line's characters or bytes, not as JSON's `line 1` (hostile47data F9, F10)."""
        text = self.line.decode("utf-8", "replace").rstrip("\r\n")
        if isinstance(self.error, UnicodeDecodeError):
            at = self.error.start
            byte = self.line[at] if at < len(self.line) else 0
            return f"{_around(text, at)!r} (byte 0x{byte:02x} at byte {at + 1} is not UTF-8: {self.error.reason})"
        if isinstance(self.error, json.JSONDecodeError):
            return f"{_around(text, self.error.pos)!r} ({self.error.msg} at character {self.error.pos + 1})"
        shown = text.strip()
        shown = shown if len(shown) <= 60 else shown[:57] + "..."
        return f"{shown!r} ({str(self.error).splitlines()[0]})"


def _around(text: str, at: int, width: int = 60) -> str:
    """`width` characters of a line ending a little after position `at`, with `...` where it was cut."""
    end = min(len(text), at + 20)
    start = max(0, end - width)
    return ("..." if start else "") + text[start:end] + ("..." if end < len(text) else "")


def parse_spec(spec: str, cwd: Path) -> tuple[Path | None, int | None]:
    """swift's DatasetSyntax.parse, for local files: (the file or directory, `#N`), or (None, N) for a hub id."""

    def local(text: str) -> Path | None:
        try:
            path = Path(text).expanduser()
            path = path if path.is_absolute() else cwd / path
            return path if path.exists() else None
        except (OSError, ValueError, RuntimeError):  # a name too long, a NUL byte, an unknown ~user
            return None

    if found := local(spec):
        return found, None
    text = spec
    prefix, sep, rest = text.partition("::")
    if sep and prefix.lower() in ("hf", "ms"):
        text = rest
    if found := local(text):
        return found, None
    take: int | None = None
    head, sep, tail = text.rpartition("#")
    if sep and tail.strip().lstrip("+-").isdigit():  # swift's int(): `#-1` names the file too
        text, take = head, int(tail)
    if found := local(text):
        return found, take
    return None, take


def check_sample_count(spec: str, cwd: Path, option: str = "--dataset") -> None:
    """swift's DatasetSyntax.parse reads what follows the last `#` of a `--dataset` that is no path as a
    sample count, with int(): anything else stops every rank with a ValueError. Raise SafeSftError first."""
    if _exists(spec, cwd):
        return
    prefix, sep, rest = spec.partition("::")
    text = rest if sep and prefix.lower() in ("hf", "ms") else spec
    if _exists(text, cwd) or "#" not in text:
        return
    tail = text.rpartition("#")[2]
    try:
        count = int(tail)
    except ValueError:
        raise SafeSftError(
            f"{option} {mask_value(spec)!r}: {tail!r} after its last # is not a whole number of samples",
            "write path#N with a whole number (swift reads #N as how many samples to take); a file whose name "
            "has a # is taken as it is only where it exists",
        ) from None
    if count < 1:  # swift asserts dataset_sample > 0, once the model has loaded
        raise SafeSftError(
            f"{option} {mask_value(spec)!r}: #{tail} takes no samples",
            "write path#N with N of 1 or more (how many samples swift takes), or the path alone for all of them",
        )


def _exists(text: str, cwd: Path) -> bool:
    """os.path.exists as swift calls it, from where safe-sft runs."""
    try:
        path = Path(text)
        return (path if path.is_absolute() else cwd / path).exists()
    except (OSError, ValueError):
        return False


def probe_datasets(specs: Sequence[str], cwd: Path, columns: str | None = None) -> DataFacts:
    """Sample every `--dataset` value; hub ids and unreadable files are said, not raised. `columns` is swift's
    `--columns` JSON (old name -> swift's name), applied to every row before it is read."""
    mapping = _columns(columns, cwd)
    budget = max(min(MAX_BYTES, TOTAL_BYTES // max(len(specs), 1)), 256 * 1024)
    samples: list[DatasetSample] = []
    warnings: list[str] = []
    for spec in specs:
        sample = probe_dataset(spec, cwd, budget, mapping)
        samples.append(sample)
        if sample.status is SampleStatus.NOT_READ:
            warnings.append(f"--dataset {sample.spec}: {sample.note} (its lengths are not in the estimate)")
    return DataFacts(datasets=tuple(samples), warnings=tuple(warnings))


def _columns(text: str | None, cwd: Path) -> dict[str, str]:
    """swift's --columns: a JSON object of column renames, inline as swift repairs it (`{'q': 'query'}`) or
    the JSON file it names; anything else is swift's to report."""
    if not text:
        return {}
    path = cwd / text  # an absolute text stays itself
    try:
        value = json.loads(path.read_text(encoding="utf-8") if is_file(path) else as_swift_repairs(text))
    except (OSError, ValueError, RecursionError):
        return {}
    return {str(k): str(v) for k, v in value.items()} if isinstance(value, dict) else {}


def probe_dataset(
    given: str, cwd: Path, budget: int = MAX_BYTES, columns: Mapping[str, str] | None = None
) -> DatasetSample:
    path, take = parse_spec(given, cwd)
    spec = mask_value(given)  # what is shown: a URL's credentials masked
    if path is None:
        name = spec.rpartition("#")[0] if take is not None else spec
        hub = name.partition("::")[0].lower() in ("hf", "ms") and "::" in name  # the user named the hub
        if FILE_LIKE.search(name) and "://" not in name and not hub:
            note = f"no such file {name!r}"
            return DatasetSample(spec, SampleStatus.NOT_READ, take=take, note=note, missing=True)
        return DatasetSample(spec, SampleStatus.NOT_LOCAL, take=take, note="not sampled, not a local file")
    if path.is_dir():
        return DatasetSample(
            spec, SampleStatus.NOT_READ, str(path), take, note="a directory (swift loads it as a dataset repo)"
        )
    if not path.is_file():  # a FIFO or a device would block or never end
        return DatasetSample(spec, SampleStatus.NOT_READ, str(path), take, note="not a regular file")
    suffix = path.suffix.lstrip(".")
    if SWIFT_LOADERS.get(suffix, suffix) not in DATASETS_LOADERS:
        note = f"its extension {suffix!r} is no loader's: swift looks it up on the hub"
        return DatasetSample(spec, SampleStatus.NOT_READ, str(path), take, note=note, unloadable_suffix=suffix)
    kind = READ_FORMATS.get(path.suffix.lower())
    if kind is None:
        return DatasetSample(
            spec, SampleStatus.NOT_READ, str(path), take, note=f"{path.suffix or 'no suffix'} files are not sampled"
        )
    try:
        with path.open("rb") as handle:
            return _read(spec, path, take, kind, handle, budget, columns or {})
    except OSError as err:
        return DatasetSample(spec, SampleStatus.NOT_READ, str(path), take, note=f"cannot read: {err.strerror or err}")


def _read(
    spec: str,
    path: Path,
    take: int | None,
    kind: str,
    handle: io.BufferedReader,
    budget: int,
    columns: Mapping[str, str],
) -> DatasetSample:
    size = path.stat().st_size
    if size <= budget and _blank(handle):
        return DatasetSample(spec, SampleStatus.NOT_READ, str(path), take, note="empty: no rows", empty=True)
    handle.seek(0)
    start = handle.read(64)
    handle.seek(0)
    wide = next((name for mark, name in WIDE_MARKS if start.startswith(mark)), None)
    if wide is not None:
        note = f"{wide} text (it starts with a {wide} byte-order mark)"
        return DatasetSample(spec, SampleStatus.NOT_READ, str(path), take, note=note, encoding=wide)
    if kind in ("lines", "json"):
        first = start.removeprefix(UTF8_MARK).lstrip()[:1]  # a UTF-8 BOM before the list
        kind = "list" if first == b"[" else "lines"
        if kind == "list" and start.startswith(UTF8_MARK):  # pyarrow, then pandas, stop on it; lines pass
            note = "a JSON list after a UTF-8 byte-order mark"
            return DatasetSample(spec, SampleStatus.NOT_READ, str(path), take, note=note, encoding="UTF-8 with BOM")
    whole = size <= budget
    represented = 0.0
    rows: list[RowText] = []
    malformed = too_long = 0
    if kind == "list":
        records, used, complete = _json_list(handle.read(budget))
        if whole and complete and not records:  # `[]`: the json builder reads no rows, as from a blank file
            return DatasetSample(spec, SampleStatus.NOT_READ, str(path), take, note="empty: no rows", empty=True)
        if whole and not complete:  # the whole file read, and the list breaks off: the rest is malformed
            malformed += 1
        how = "the whole file" if whole else f"its first {used:,} bytes (a JSON list is read from its start)"
        raw: Iterable[tuple[object, float]] = ((r, 1.0) for r in records)
        read_bytes = used
    elif kind == "csv":
        data = handle.read(budget)
        if not whole:
            data = data[: data.rfind(b"\n") + 1]
        raw, read_bytes = ((r, 1.0) for r in _csv_rows(data)), len(data)
        how = "the whole file" if whole else f"its first {read_bytes:,} bytes"
    else:
        if whole:
            lines, read_bytes, too_long = [(line, 1.0) for line in handle.read(budget).split(b"\n")], size, 0
        else:
            lines, read_bytes, too_long = _windows(handle, size, budget)
        lines = [(line, weight) for line, weight in lines if line.strip()]
        represented = sum(weight for _, weight in lines)  # the rows of the file these lines stand for
        lines = _spread(lines, MAX_ROWS)  # parse no more rows than are kept
        how = "the whole file" if whole else f"{read_bytes:,} bytes in {WINDOWS} windows spread over it"
        raw = _line_records(lines, text=kind == "text")
    count = 0
    not_json: str | None = None
    for record, weight in raw:
        count += 1
        if isinstance(record, NotJson):
            not_json = not_json or record.describe()
            malformed += 1
            continue
        if columns and isinstance(record, dict):
            record = {columns.get(key, key): value for key, value in record.items()}
        try:
            rows.append(row_text(record, weight))
        except Malformed:
            malformed += 1
    rows = _spread(rows, MAX_ROWS)
    parsed = count + too_long - malformed  # the rows swift trains on (it skips what it cannot read)
    in_file: int | None = parsed
    exact = whole
    if kind in ("lines", "text") and represented > count + too_long:  # more lines than were parsed
        in_file = round(represented * parsed / max(count + too_long, 1)) if parsed > 0 else None
        exact = False
    elif not whole:
        in_file = int(size * parsed / read_bytes) if read_bytes and parsed > 0 else None
    if not rows and not too_long:
        return DatasetSample(
            spec,
            SampleStatus.NOT_READ,
            str(path),
            take,
            malformed=malformed,
            note=f"no row swift reads in {how}",
            not_json=not_json,
        )
    return DatasetSample(
        spec,
        SampleStatus.SAMPLED,
        str(path),
        take,
        rows=tuple(rows),
        malformed=malformed,
        too_long=too_long,
        rows_in_file=in_file,
        rows_in_file_exact=exact,
        bytes_read=read_bytes,
        note=f"read {how}",
        not_json=not_json,
    )


def _blank(handle: io.BufferedReader, chunk: int = 4096) -> bool:
    """Nothing but whitespace to the end of the file: read only as far as the first byte that is not (a file
    with rows has one in its first chunk, so this costs one small read, not a second pass over the file)."""
    while data := handle.read(chunk):
        if data.strip():
            return False
    return True


def _spread(rows: list[T], limit: int) -> list[T]:
    """At most `limit` rows, evenly spaced over what was read (the file's order may be sorted by length)."""
    if len(rows) <= limit:
        return rows
    return [rows[i * len(rows) // limit] for i in range(limit)]


def _windows(handle: io.BufferedReader, size: int, budget: int) -> tuple[list[tuple[bytes, float]], int, int]:
    """Whole lines from WINDOWS windows spread over the file, at most about `budget` bytes in all, each with
    the number of the file's rows it stands for: a window stands for size / WINDOWS bytes, so in a file
    sorted by length a row of a window of long rows stands for fewer rows than one of short rows."""
    per = max(budget // WINDOWS, 1)
    per_rows = -(-MAX_ROWS // WINDOWS)
    lines: list[tuple[bytes, float]] = []
    used = too_long = 0
    end, aligned = 0, True  # where the previous window stopped; whether that is a line boundary
    for k in range(WINDOWS):
        if used >= budget:
            break
        offset = k * size // WINDOWS
        handle.seek(max(offset, end))  # a long line may have carried the last window past this one's start
        if offset > end or not aligned:
            skipped = handle.readline(LINE_LIMIT)  # the line the window starts in is partial
            used += len(skipped)
            if not skipped.endswith(b"\n"):
                end, aligned = handle.tell(), False
                continue
        start, first = used, len(lines)
        aligned = True
        while used - start < per and len(lines) - first < per_rows and used < budget + LINE_LIMIT:
            line = handle.readline(LINE_LIMIT)
            if not line:
                break
            used += len(line)
            if not line.endswith(b"\n") and len(line) == LINE_LIMIT:
                too_long += 1
                rest = handle.readline(LINE_LIMIT)  # where short, the rest; a longer line ends this window
                used += len(rest)
                aligned = not rest or rest.endswith(b"\n")
                break
            lines.append((line, 0.0))
        end = handle.tell()
        window = lines[first:]
        read = sum(len(line) for line, _ in window)
        lines[first:] = [(line, size / WINDOWS / read) for line, _ in window]
    return lines, used, too_long


def _line_records(lines: Iterable[tuple[bytes, float]], *, text: bool) -> Iterator[tuple[object, float]]:
    for line, weight in lines:
        if text:
            yield {"text": line.decode("utf-8", "replace").rstrip("\r\n")}, weight
            continue
        try:
            value = json.loads(line)
        except ValueError as err:  # UnicodeDecodeError too
            yield NotJson(line, err), weight
            continue
        if isinstance(value, dict):
            yield value, weight
        else:  # the json builder reads a row of each line: an array or a string there stops it as a bad line does
            yield NotJson(line, ValueError(f"a JSON {JSON_KINDS.get(type(value), 'value')}, not an object")), weight


def _json_list(data: bytes) -> tuple[list[object], int, bool]:
    """The elements of a JSON list decodable from this prefix: (elements, bytes used, the list ended)."""
    text = data.decode("utf-8", "replace")
    decoder = json.JSONDecoder()
    pos = text.index("[") + 1
    out: list[object] = []
    ws = re.compile(r"[\s,]*")
    while True:
        match = ws.match(text, pos)
        pos = match.end() if match else pos
        if pos >= len(text):
            return out, len(text[:pos].encode()), False
        if text[pos] == "]":
            return out, len(data), True
        try:
            value, pos = decoder.raw_decode(text, pos)
        except ValueError:
            return out, len(text[:pos].encode()), False
        out.append(value)


def _csv_rows(data: bytes) -> Iterator[object]:
    reader = csv.DictReader(io.StringIO(data.decode("utf-8", "replace"), newline=""))
    try:
        yield from reader
    except csv.Error:
        yield None


def chars(text: str) -> tuple[int, int, int, int]:
    """(latin, wide, digits, other) characters of a string: ASCII non-digits, 3-4 byte UTF-8 characters
    (CJK and the like), ASCII digits, 2-byte UTF-8 characters."""
    n = len(text)
    if text.isascii():
        digits = len(text.encode().translate(None, _KEEP_DIGITS))
        return n - digits, 0, digits, 0
    data = text.encode("utf-8", "surrogatepass")
    ascii_count = len(data.translate(None, _KEEP_ASCII))
    two_byte = len(data.translate(None, _KEEP_TWO_BYTE_LEADS))
    digits = len(data.translate(None, _KEEP_DIGITS))
    return ascii_count - digits, n - ascii_count - two_byte, digits, two_byte


class _Counter:
    def __init__(self) -> None:
        self.strings: list[str] = []  # counted once, joined: one chars() call per row
        self.label_strings: list[str] = []
        self.label_turns = 0
        self.labelling = False
        self.messages = self.images = 0
        self.other_media = self.tools = self.system = False

    def text(self, value: object) -> None:
        """Every string inside `value` (tool calls and nested content included), media blocks counted apart."""
        if type(value) is str:
            self.strings.append(value)
            if self.labelling:
                self.label_strings.append(value)
        elif isinstance(value, dict):
            block = value.get("type")
            if block in IMAGE_BLOCKS:
                self.images += 1
            elif block in OTHER_MEDIA_BLOCKS:
                self.other_media = True
            else:
                for key, item in value.items():
                    if key not in ROLE_KEYS and key != "type":
                        self.text(item)
        elif isinstance(value, list):
            for item in value:
                self.text(item)

    def answer(self, value: object) -> None:
        """An assistant turn: its text is what swift trains on (the labels)."""
        self.labelling, self.label_turns = True, self.label_turns + 1
        self.text(value)
        self.labelling = False

    def media(self, row: dict[str, Any]) -> None:
        for key in IMAGE_KEYS:
            images = row.get(key)
            if isinstance(images, list):
                self.images += len(images)
            elif images:
                self.images += 1
        if any(row.get(key) for key in OTHER_MEDIA_KEYS):
            self.other_media = True

    def row(self, weight: float) -> RowText:
        latin, wide, digits, other = chars("".join(self.strings))
        labels = RowText(*chars("".join(self.label_strings)), self.label_turns) if self.label_turns else None
        return RowText(
            latin,
            wide,
            digits,
            other,
            self.messages,
            self.images,
            self.other_media,
            weight,
            labels,
            tools=self.tools,
            system=self.system,
        )


def _maybe_json(value: object) -> object:
    """csv cells and some jsonl files hold the messages list as a JSON string (swift's repair_messages)."""
    if isinstance(value, str) and value.lstrip()[:1] in ("[", "{"):
        try:
            return json.loads(value)
        except ValueError:
            return value
    return value


def row_text(record: object, weight: float = 1.0) -> RowText:
    """One row as swift's preprocessors read it: its turns' text, the system prompt, tools and media."""
    if not isinstance(record, dict):
        raise Malformed("not an object")
    counter = _Counter()
    counter.media(record)
    messages_key = next((k for k in MESSAGE_KEYS if k in record), None)
    for key in SYSTEM_KEYS:
        counter.system |= record.get(key) is not None  # even empty: swift then writes no default system prompt
        if record.get(key):
            counter.text(_maybe_json(record[key]))
            counter.messages += 1
    if tools := record.get("tools"):
        # the template writes the schemas as JSON, keys and punctuation included
        counter.strings.append(tools if isinstance(tools, str) else json.dumps(tools, ensure_ascii=False))
        counter.tools = True
    if messages_key is not None:
        messages = _maybe_json(record[messages_key])
        if not isinstance(messages, list) or not messages or not all(isinstance(m, dict) for m in messages):
            raise Malformed("messages is not a list of objects")
        for message in messages:
            if not message.keys().isdisjoint(TURN_KEYS):
                counter.messages += 1
                role = message.get("role", message.get("from"))
                counter.system |= role == "system"
                trained = role in ANSWER_ROLES
                (counter.answer if trained else counter.text)(message)
            else:  # ShareGPT pairs: {"user": ..., "assistant": ...}
                turns = [k for k in SHAREGPT_KEYS if k in message]
                if not turns:
                    raise Malformed("a message with neither role/content nor user/assistant")
                counter.messages += len(turns)
                for key in turns:
                    (counter.answer if key in ANSWER_ROLES else counter.text)(message[key])
        return counter.row(weight)
    query = next((record[k] for k in QUERY_KEYS if record.get(k)), None)
    if "instruction" in record and "input" in record:  # swift's AlpacaPreprocessor joins the two
        query = "\n".join(str(record[k]) for k in ("instruction", "input") if record.get(k))
    response = next((record[k] for k in RESPONSE_KEYS if record.get(k) is not None), None)
    if isinstance(response, list) and response:  # swift picks one of several answers: count the longest
        response = max((str(r) for r in response), key=len)
    history = _maybe_json(record.get("history")) or []
    if query is None and response is None:
        raise Malformed("no messages, query or response")
    if not isinstance(history, list):
        raise Malformed("history is not a list of pairs")
    for pair in history:
        if not isinstance(pair, list | tuple) or len(pair) != 2:
            raise Malformed("history is not a list of pairs")
        counter.text(pair[0])
        counter.answer(pair[1])
    counter.messages += 2 * len(history)
    for turn, trained in ((query, False), (response, True)):
        if turn is not None:
            counter.messages += 1
            text = turn if isinstance(turn, str) else json.dumps(turn, ensure_ascii=False)
            (counter.answer if trained else counter.text)(text)
    return counter.row(weight)
