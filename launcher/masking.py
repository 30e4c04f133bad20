"""Hide secrets in everything safe-sft writes or prints: by name, and by the shape of the value.

Pure, and below every layer that shows text (render.py, run/report.py, explain.py, show_report.py), so
none of them imports another to mask. Three ways a secret is recognised:
- by an environment variable's name (HF_TOKEN, WANDB_API_KEY, ...: TOKEN, KEY, SECRET, PASSWORD);
- by an argument's name (`--hub_token`, `--api_key`, `--*_token`, `--*password*`, `--*secret*`), in
  both `--name value` and `--name=value`, and as `name=value` / `'name': 'value'` inside a log line;
- by the value's shape, wherever it stands: Hugging Face (`hf_...`), OpenAI-style (`sk-...`), GitHub
  (`ghp_...`, `github_pat_...`) and Slack (`xox?-...`) tokens, AWS access key ids, and the credentials
  of a URL (`https://user:pass@host` keeps the user and the host).
"""

from __future__ import annotations

import re
from collections.abc import Sequence

MASK = "****"
ENV_MARKERS = ("TOKEN", "KEY", "SECRET", "PASSWORD")

_SECRET_ARG = re.compile(r"(?:^|_)(?:token|api_?key|access_?key|secret\w*|\w*password\w*|passwd|credentials?)$|secret")
_TOKEN_SHAPES = re.compile(
    r"\b(?:hf_[A-Za-z0-9]{8,}|sk-[A-Za-z0-9_\-]{8,}|gh[pousr]_[A-Za-z0-9]{16,}|github_pat_[A-Za-z0-9_]{16,}"
    r"|xox[abposr]-[A-Za-z0-9\-]{8,}|AKIA[0-9A-Z]{16})"
)
_URL_CREDENTIALS = re.compile(r"(?P<scheme>[A-Za-z][A-Za-z0-9+.\-]*://)(?P<user>[^\s:/@'\"]*):[^\s/@'\"]+@")
# `hub_token=hf_x`, `'hub_token': 'x'`, `"api_key": "x"` inside a line of text (swift prints its arguments)
_NAMED_IN_TEXT = re.compile(
    r"(?P<name>\b[A-Za-z_]*(?:token|api_?key|access_?key|secret|password|passwd)\b)"
    r"(?P<sep>['\"]?\s*[=:]\s*['\"]?)(?P<value>[^\s'\",)}\]]+)",
    re.IGNORECASE,
)


def is_secret_env(name: str) -> bool:
    return any(marker in name.upper() for marker in ENV_MARKERS)


def is_secret_arg(flag: str) -> bool:
    """`--hub_token`, `--api-key`, `--db_password`: an argument whose value is a secret."""
    name = flag.lstrip("-").replace("-", "_").lower()
    return bool(name) and bool(_SECRET_ARG.search(name)) and not name.endswith("tokens")


def mask_value(text: str) -> str:
    """Token-shaped values and URL credentials replaced, the rest of the text kept."""
    text = _TOKEN_SHAPES.sub(MASK, text)
    return _URL_CREDENTIALS.sub(lambda m: f"{m['scheme']}{m['user']}:{MASK}@", text)


def mask_env(name: str, value: str) -> str:
    """An environment variable as shown: all of it hidden when its name looks secret."""
    return MASK if is_secret_env(name) else mask_value(value)


def mask_argv(argv: Sequence[str]) -> list[str]:
    """A command line with the values of secret arguments, and secret-shaped values, hidden."""
    out: list[str] = []
    hide_next = False
    for arg in argv:
        if hide_next and not arg.startswith("--"):
            out.append(MASK)
            continue
        hide_next = False
        if arg.startswith("--"):
            flag, eq, _ = arg.partition("=")
            if is_secret_arg(flag):
                if eq:
                    out.append(f"{flag}={MASK}")
                else:
                    out.append(arg)
                    hide_next = True
                continue
        out.append(mask_value(arg))
    return out


# a tokenizer's special tokens are printed beside the arguments and are no secret
_SPECIAL_TOKENS = ("bos_token", "eos_token", "pad_token", "unk_token", "sep_token", "cls_token", "mask_token")


def _mask_named(match: re.Match[str]) -> str:
    name = match["name"]
    if name.lower().endswith(_SPECIAL_TOKENS):
        return match[0]
    return f"{name}{match['sep']}{MASK}"


def mask_text(line: str) -> str:
    """A line of free text (a log line, an error): secrets by shape, and `name=value` pairs by name."""
    return _NAMED_IN_TEXT.sub(_mask_named, mask_value(line))
