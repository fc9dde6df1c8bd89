"""Flags from the environment: every daemon flag ``--a.b-c`` can also be given as ``GPUEFF_A_B_C``
(what ``docker run -e`` and Kubernetes ``env:`` users write). The command line wins over the
environment, which wins over the config file, which wins over the defaults."""

from __future__ import annotations

import argparse
from collections.abc import Mapping, Sequence

PREFIX = "GPUEFF_"
TRUE = ("1", "true", "yes", "on")
FALSE = ("0", "false", "no", "off")


def variable_name(option: str) -> str:
    """``--web.listen-address`` -> ``GPUEFF_WEB_LISTEN_ADDRESS``."""
    return PREFIX + option.lstrip("-").upper().replace(".", "_").replace("-", "_")


def variables(parser: argparse.ArgumentParser) -> list[tuple[str, argparse.Action]]:
    """(variable, action) for every flag of ``parser`` that the environment can set."""
    found = []
    for action in parser._actions:
        names = [option for option in action.option_strings if option.startswith("--") and not option.startswith("--no-")]
        if names and action.dest not in ("help", "version"):
            found.append((variable_name(names[0]), action))
    return found


def _given(action: argparse.Action, argv: Sequence[str]) -> bool:
    """Whether the command line sets ``action`` (by any of its names, ``--flag value`` or ``--flag=value``)."""
    names = set(action.option_strings)
    names |= {"--no-" + option[2:] for option in action.option_strings if isinstance(action, argparse.BooleanOptionalAction)}
    return any(word.split("=", 1)[0] in names for word in argv if word.startswith("--"))


def _truth(parser: argparse.ArgumentParser, name: str, value: str) -> bool:
    if value.strip().lower() in TRUE:
        return True
    if value.strip().lower() in FALSE:
        return False
    parser.error(f"environment variable {name}: expected true or false, got {value[:64]!r}")


def _checked(parser: argparse.ArgumentParser, name: str, action: argparse.Action, value: str) -> None:
    """The value as the flag's own parser takes it, so that an error names the variable."""
    try:
        converted = action.type(value) if callable(action.type) else value
    except (argparse.ArgumentTypeError, TypeError, ValueError) as error:
        parser.error(f"environment variable {name}: {error}")
    if action.choices is not None and converted not in action.choices:
        parser.error(f"environment variable {name}: {value[:64]!r} is not one of {', '.join(map(str, action.choices))}")


def arguments_from_environment(parser: argparse.ArgumentParser, argv: Sequence[str], environ: Mapping[str, str]) -> list[str]:
    """The flags the environment sets and the command line does not, as command-line words to put
    before ``argv``. A flag of a mutually exclusive group is left out where the command line sets
    another flag of that group (``--replay`` on the command line beats ``GPUEFF_DEMO=true``)."""
    rivals: dict[int, list[argparse.Action]] = {}
    for group in parser._mutually_exclusive_groups:
        for action in group._group_actions:
            rivals[id(action)] = group._group_actions
    words: list[str] = []
    for name, action in variables(parser):
        value = environ.get(name)
        if value is None or any(_given(rival, argv) for rival in rivals.get(id(action), [action])):
            continue
        option = next(option for option in action.option_strings if option.startswith("--"))
        if isinstance(action, (argparse._StoreTrueAction, argparse._StoreFalseAction)):
            words += [option] if _truth(parser, name, value) else []
        elif isinstance(action, argparse.BooleanOptionalAction):
            words.append(option if _truth(parser, name, value) else "--no-" + option[2:])
        elif isinstance(action, argparse._AppendAction):  # several values, comma-separated
            for each in (part.strip() for part in value.split(",")):
                _checked(parser, name, action, each)
                words.append(f"{option}={each}")
        elif action.nargs == "+":  # several values, whitespace-separated
            parts = value.split()
            for each in parts:
                _checked(parser, name, action, each)
            words += [option, *parts] if parts else []
        else:
            _checked(parser, name, action, value)
            words.append(f"{option}={value}")
    return words
