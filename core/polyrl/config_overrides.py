"""``polyrl train CONFIG --set key=value``: change any config key from the command line.

Why the overrides go into the parsed TOML table and not into the built config: the table then
takes exactly the path a file takes (``RunConfig.from_dict``), so an override gets the same key,
type and range checks as the same line in the file, and an unknown key is named the same way.
"""

from __future__ import annotations

import copy
import json
import re
import sys
from collections.abc import Iterable, Mapping
from typing import Any

from polyrl import long_numbers
from polyrl.errors import ConfigError
from polyrl.text_validity import surrogate_at

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

FIX = "write --set SECTION.KEY=VALUE, e.g. --set algorithm.beta=0.04 or --set rewards.0.weight=0.5"


def parse_value(raw: str) -> Any:
    """A TOML literal (``0.04``, ``true``, ``[0.9, 0.99]``, ``"x"``), else the text itself as a string."""
    try:
        return tomllib.loads(f"value = {raw}")["value"]
    except tomllib.TOMLDecodeError:
        return raw
    except ValueError as exc:  # int()'s digit limit, which tomllib lets through as is
        if not long_numbers.is_digit_limit(exc):
            raise
        raise ConfigError(f"the value is {long_numbers.described(f'value = {raw}')[1]}", field="--set",
                          fix=long_numbers.SETTING_FIX) from None


def parse_assignment(text: str) -> tuple[list[str], Any]:
    """``"algorithm.beta=0.04"`` -> ``(["algorithm", "beta"], 0.04)``."""
    _refuse_undecodable(text)
    key, sep, raw = text.partition("=")
    parts = key.strip().split(".")
    if not sep or any(not p.strip() for p in parts):
        raise ConfigError(f"{text!r} is not KEY=VALUE", field="--set", fix=FIX)
    if len(parts) < 2:
        name = key.strip()
        from polyrl.config import section_classes

        if name in section_classes():
            raise ConfigError(f"{name!r} names a section, not a key", field="--set", fix=FIX)
        raise ConfigError(f"{name!r} has no SECTION. before it", field="--set", fix=_bare_key_fix(name, raw.strip()))
    where = ".".join(p.strip() for p in parts)
    try:
        value = parse_value(raw.strip())
    except ConfigError as exc:  # named by the key it sets
        raise exc.renamed(where) from None
    _refuse_other_literal(raw.strip(), value, where)
    _refuse_broken_literal(raw.strip(), value, where)
    return [p.strip() for p in parts], value


def _refuse_undecodable(text: str) -> None:
    """``--set logging.run_name=$'\\xff'`` (bytes that are not UTF-8, which reach Python as lone
    surrogates) is an error naming the byte. Why: the value was taken as is and broke later, far
    from the command line: a folder or file name, a tracker's run name, a JSON summary or log line."""
    at = surrogate_at(text)
    if at is None:
        return
    key = text.partition("=")[0].strip()
    field = key if surrogate_at(key) is None and key else "--set"
    char = ord(text[at])
    what = f"byte {char - 0xDC00:#04x}, which is not UTF-8" if 0xDC80 <= char <= 0xDCFF else f"U+{char:04X}, a lone surrogate"
    raise ConfigError(f"{text!r} holds {what}", field=field,
                      fix="pass the setting as UTF-8 text (check the encoding of the terminal or script "
                          "that gave it)")


#: Python's, JSON's and YAML's spellings of true, false and null that TOML does not read, and what
#: to write instead.
_OTHER_LITERALS = {"True": "true", "TRUE": "true", "False": "false", "FALSE": "false",
                   "None": "", "null": "", "NULL": "", "Null": "", "~": ""}


def _refuse_other_literal(raw: str, value: Any, where: str) -> None:
    """``--set key=False`` (Python's spelling) is an error, not the text "False". Why: where no
    type check follows (``model.chat_template_kwargs.enable_thinking``, a reward's or a task's
    options) the text went through as is, and a template reads "False" as true: Qwen3 kept
    thinking. ``None``/``null`` meant "unset", which TOML has no value for."""
    if value != raw or raw not in _OTHER_LITERALS:
        return
    toml = _OTHER_LITERALS[raw]
    fix = (f"write --set {where}={toml} (TOML's spelling)" if toml
           else "leave the key out of the file to unset it (TOML has no null)")
    raise ConfigError(f"{raw!r} is not a TOML value (it would be read as the text {raw!r})", field=where,
                      fix=f"{fix}; for the text itself, quote it: --set '{where}=\"{raw}\"'")


#: How a TOML string, array or inline table starts: a value opening so that is not TOML is a typo in it.
_LITERAL_OPENERS = ("[", "{", '"', "'")


def _refuse_broken_literal(raw: str, value: Any, where: str) -> None:
    """``--set train.output_dir=[1,2`` or ``--set logging.run_name="exp 1`` (a bracket or quote
    left open) is an error naming TOML's complaint, not the text itself. Why: "else a string" took
    them as is: a run went to a folder named ``[1,2``, a run name kept its stray quote, and a
    broken ``stop = [...]`` array was blamed on its type with a fix quoting the whole text."""
    if value != raw or not raw.startswith(_LITERAL_OPENERS):
        return
    try:
        tomllib.loads(f"value = {raw}")
    except tomllib.TOMLDecodeError as exc:  # its place in VALUE, not in the "value = VALUE" parsed
        why = re.sub(r"\(at line 1, column (\d+)\)", lambda m: f"(at character {int(m[1]) - 8})", str(exc))
    else:  # pragma: no cover - parse_value read it as TOML then
        return
    text = f"'{raw}'" if "'" not in raw and "\n" not in raw else json.dumps(raw)
    raise ConfigError(f"{raw!r} opens a TOML string, array or table but is not valid TOML: {why}", field=where,
                      fix=f"close its brackets and quotes; for this text itself, give it as a TOML string: "
                          f"{where}={text}")


def _bare_key_fix(name: str, raw: str) -> str:
    """The fix for ``--set NAME=VALUE`` without a section: the section that has ``NAME`` (polyrl's
    key, or where TRL's ``GRPOConfig`` name lives), else the general form."""
    from polyrl.config import key_owners
    from polyrl.configtools import key_typo, trl_typo
    from polyrl.trl_names import Preset, entry_of, toml_literal, trl_value

    entry = entry_of(name)
    if entry is not None and entry.key is None:
        return f"remove it: TRL's {name} has no polyrl equivalent ({entry.note})"
    if entry is not None and entry.key is not None:
        head = f"TRL's {name} is polyrl's {entry.key}"
        value = parse_value(raw)
        translated = trl_value(entry, value)
        if isinstance(translated, Preset):
            return f'TRL\'s {name} = {raw} is polyrl\'s preset of that name: --set algorithm.name="{translated.name}"'
        target = entry.key.replace("rewards[]", "rewards.0")
        if translated is not value:
            return f"{head}: --set {target}={toml_literal(translated)}"
        if entry.note:  # the value does not carry over as it is (a bool for a step count, a list for one weight)
            return f"{head}: {entry.note.format(value=raw)}"
        return f"{head}: --set {target}={raw}"
    owners = key_owners(name)
    if owners:
        return f"write --set {owners[0]}={raw}" + (f" (also in: {', '.join(owners[1:])})" if owners[1:] else "")
    # a misspelt key gets the key it is close to, as the same typo in a file's table does (`temprature`,
    # TRL's `lerning_rate`): it got the general form, which names neither
    close = key_typo(name)
    if close is not None:
        return f"did you mean {close!r}? " + _bare_key_fix(close, raw)
    close = trl_typo(name)
    if close is not None:
        return f"did you mean TRL's {close!r}? " + _bare_key_fix(close, raw)
    return FIX


def apply_overrides(data: Mapping[str, Any], assignments: Iterable[str]) -> dict[str, Any]:
    """A copy of the parsed config ``data`` with every ``KEY=VALUE`` assignment set, in order.

    Missing tables are created (``--set lora.rank=8`` on a config without ``[lora]``); an array
    entry is addressed by its index (``rewards.0.weight``). Unknown keys are left for
    ``RunConfig.from_dict`` to reject, so the message matches the file's."""
    out = copy.deepcopy(dict(data))
    for text in assignments:
        parts, value = parse_assignment(text)
        _refuse_unknown_section(parts, text, out)
        node: Any = out
        for depth, part in enumerate(parts[:-1]):
            where = ".".join(parts[: depth + 1])
            if isinstance(node, list):
                node = node[_index(node, part, where)]
            elif isinstance(node, dict):
                node = node.setdefault(part, {})
            else:
                raise ConfigError(f"{where} is a value, not a table", field=where, fix=FIX)
        last, where = parts[-1], ".".join(parts)
        if isinstance(node, list):
            node[_index(node, last, where)] = value
        elif isinstance(node, dict):
            node[last] = value
        else:
            raise ConfigError(f"{'.'.join(parts[:-1])} is a value, not a table", field=where, fix=FIX)
    return out


def _refuse_unknown_section(parts: list[str], text: str, data: Mapping[str, Any]) -> None:
    """``--set genration.group_size=4`` names the ``--set`` to write instead. Why: the file's
    message for an unknown table ("rename the table to [generation]") sent the user looking for a
    table the file does not have. A table the file has too is left to the file's message."""
    from polyrl.config import close_section, section_classes

    head = parts[0]
    known = section_classes()
    if head in known or head in data:
        return
    section = close_section(head)
    if section is None:
        fix = f"valid sections: {', '.join(sorted(known))}"
    else:
        rest = parts[1:] if section != "rewards" or parts[1].isdigit() else ["0", *parts[1:]]  # an entry's index
        fix = f"did you mean --set {'.'.join([section, *rest])}={text.partition('=')[2].strip()}?"
    raise ConfigError(f"unknown section [{head}] (from --set {text.strip()})", field=head, fix=fix)


def _index(items: list[Any], part: str, where: str) -> int:
    """An array entry's index, written in ASCII digits as TOML writes them. Why ASCII: ``str.isdigit``
    also passes ``²`` (which ``int`` refuses: a traceback) and ``０`` or ``١`` (which ``int`` reads as 0
    and 1: a fullwidth or Arabic-Indic digit set a reward's key without a word)."""
    if not (part.isascii() and part.isdigit()) or int(part) >= len(items):
        raise ConfigError(f"no entry {part!r}: the array has {len(items)}", field=where,
                          fix=f"use an index from 0 to {len(items) - 1}")
    return int(part)
