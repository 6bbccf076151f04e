"""Command-line flags generated from a config dataclass: the one way a config becomes flags.

Every field becomes ``--field-name`` (``n_agents`` is ``--agents`` and ``out_dir`` is
``--out`` everywhere, see :data:`FLAG_NAMES`), with its help from ``field(metadata={"help":
...})``. Types map to argparse as follows:

* ``bool``: ``--x`` (store_true) when the default is False, ``--x/--no-x`` when it is True or
  the parser records typed flags (``--from RUN_DIR`` may restore a True);
* ``int``, ``float``, ``str`` (and ``Any``, taken as text), optionally ``| None``;
* ``tuple[T, ...]`` / ``list[T]``: one or more values, each may also be comma-separated
  (``--temperatures 0.1 0.3`` or ``--temperatures 0.1,0.3``); items typed ``str | None`` read
  ``none``/``base`` as None;
* ``Literal[...]`` or ``metadata={"choices": (...)}``: argparse choices.

``metadata={"aliases": ("--old-name",)}`` adds further spellings. A field without a default is
a required flag. Fields of other types (mappings, objects) must be skipped and given a flag by
hand; the generator says so instead of guessing.

A field holding another config dataclass (``team: TeamConfig``) is composed, not flagged as
one: its own fields become flags of the same command, spelled as everywhere (``--agents``,
``--max-steps``), so a flag has one meaning in every command. The field's
``metadata={"skip_flags": (...)}`` names nested fields the outer config sets itself (no flag);
``skip``, ``defaults`` and ``helps`` reach nested fields by dotted names (``team.n_agents``),
and a nested flag's default is the outer field's default instance's value. Two fields with one
flag are an argparse error at build time.

:func:`config_from_args` builds the config back from the parsed namespace,
:func:`config_argv` writes the flags that reproduce a set of values (for run records), and
:func:`replace_given` applies only the flags a user typed to a stored config (``record=True``).
"""

from __future__ import annotations

import argparse
import dataclasses
import types
import typing
from collections.abc import Callable, Collection, Mapping
from typing import Any

from collabui.errors import ConfigError

__all__ = ["FLAG_NAMES", "add_config_flags", "changed_flags", "config_argv", "config_from_args", "field_defaults",
           "flag_of", "given_flags", "nested_values", "refuse_ignored", "replace_given"]

#: Field names whose flag is spelled differently, the same in every command.
FLAG_NAMES: Mapping[str, str] = {"n_agents": "agents", "out_dir": "out"}

_NONE_WORDS = ("", "none", "base")
#: Namespace attribute of the flags typed on the command line (parsers built with record=True).
_GIVEN = "_given_flags"


@dataclasses.dataclass(frozen=True)
class _Kind:
    """How one field is read from the command line."""

    convert: Callable[[str], Any]
    name: str  # the item type's name, for error messages
    many: bool = False
    is_bool: bool = False
    choices: tuple[Any, ...] | None = None


def flag_of(name: str, rename: Mapping[str, str] | None = None) -> str:
    """The flag of field ``name``: ``--`` + its (renamed) name with dashes."""
    spelled = (rename or {}).get(name) or FLAG_NAMES.get(name, name)
    return "--" + spelled.replace("_", "-")


def _optional_item(text: str) -> str | None:
    return None if text.strip().lower() in _NONE_WORDS else text


def _scalar(tp: Any, where: str) -> _Kind:
    if tp is Any or tp is str:
        return _Kind(str, "text")
    if tp is bool:
        return _Kind(bool, "bool", is_bool=True)
    if tp in (int, float):
        return _Kind(tp, tp.__name__)
    if typing.get_origin(tp) is typing.Literal:
        values = typing.get_args(tp)
        return _Kind(type(values[0]), type(values[0]).__name__, choices=values)
    raise TypeError(f"{where}: type {tp!r} has no generated flag; skip the field and add its flag by hand")


def _kind(tp: Any, where: str) -> _Kind:
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        if len(args) != 1:
            raise TypeError(f"{where}: union {tp!r} has no generated flag; skip the field and add its flag by hand")
        return _kind(args[0], where)
    if origin in (tuple, list):
        args = typing.get_args(tp)
        if origin is tuple and not (len(args) == 2 and args[1] is Ellipsis):
            raise TypeError(f"{where}: only tuple[T, ...] has a generated flag, not {tp!r}")
        item = args[0] if args else str
        item_args = [a for a in typing.get_args(item) if a is not type(None)]
        if typing.get_origin(item) in (typing.Union, types.UnionType) and item_args == [str]:
            return _Kind(_optional_item, "text", many=True)
        scalar = _scalar(item, where)
        if scalar.is_bool:
            raise TypeError(f"{where}: tuples of bools have no generated flag")
        return dataclasses.replace(scalar, many=True)
    return _scalar(tp, where)


class _Items(argparse.Action):
    """One or more values, each possibly comma-separated, stored as a tuple of typed items."""

    def __init__(self, *args: Any, convert: Callable[[str], Any], type_name: str, record: bool = False,
                 **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.convert, self.type_name, self.record = convert, type_name, record

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace,
                 values: Any, option_string: str | None = None) -> None:
        items: list[Any] = []
        for text in values:
            for part in str(text).split(","):
                try:
                    items.append(self.convert(part.strip()))
                except ValueError:
                    raise argparse.ArgumentError(self, f"invalid {self.type_name} value: {part!r}") from None
        setattr(namespace, self.dest, tuple(items))
        if self.record:
            _note(namespace, self.dest)


def _note(namespace: argparse.Namespace, dest: str) -> None:
    given = getattr(namespace, _GIVEN, None)
    if given is None:
        given = set()
        setattr(namespace, _GIVEN, given)
    given.add(dest)


class _Store(argparse.Action):
    """argparse's ``store``, noting that the flag was typed (``record=True``)."""

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace,
                 values: Any, option_string: str | None = None) -> None:
        setattr(namespace, self.dest, values)
        _note(namespace, self.dest)


class _Optional(argparse.BooleanOptionalAction):
    """``--x/--no-x``, noting that the flag was typed (``record=True``)."""

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace,
                 values: Any, option_string: str | None = None) -> None:
        super().__call__(parser, namespace, values, option_string)
        _note(namespace, self.dest)


def given_flags(args: argparse.Namespace) -> frozenset[str]:
    """Destinations (field names) of the flags typed on the command line, of a parser whose
    flags were added with ``record=True`` (a flag typed with its default value counts)."""
    return frozenset(getattr(args, _GIVEN, None) or ())


def _show(value: Any) -> str:
    return ",".join("none" if v is None else str(v) for v in value) if isinstance(value, tuple | list) else str(value)


def _default(f: dataclasses.Field[Any]) -> Any:
    if f.default is not dataclasses.MISSING:
        return f.default
    if f.default_factory is not dataclasses.MISSING:
        return f.default_factory()
    return dataclasses.MISSING


def _selected(cls: type, only: Collection[str] | None, skip: Collection[str]) -> list[dataclasses.Field[Any]]:
    names = {f.name for f in dataclasses.fields(cls)}
    # Dotted names (team.n_agents) are nested fields, checked when the nested config is reached.
    unknown = sorted((set(only or ()) | {s for s in skip if "." not in s}) - names)
    if unknown:
        raise TypeError(f"{cls.__name__} has no field(s) {unknown}")
    return [f for f in dataclasses.fields(cls) if f.init and f.name not in skip and (only is None or f.name in only)]


def _nested_class(tp: Any) -> type | None:
    """The config dataclass a field holds (``TeamConfig`` of ``TeamConfig | None``), or None."""
    if typing.get_origin(tp) in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        tp = args[0] if len(args) == 1 else None
    return tp if isinstance(tp, type) and dataclasses.is_dataclass(tp) else None


def _inner(values: Mapping[str, Any] | None, name: str) -> dict[str, Any]:
    """The entries of dotted keys ``name.x``, keyed ``x``."""
    prefix = name + "."
    return {k[len(prefix):]: v for k, v in (values or {}).items() if k.startswith(prefix)}


def _inner_names(names: Collection[str], name: str) -> set[str]:
    """The dotted names ``name.x`` of ``names``, as ``x``."""
    return {k[len(name) + 1:] for k in names if k.startswith(name + ".")}


def _nested_fields(f: dataclasses.Field[Any], sub: type, skip: Collection[str]) -> list[dataclasses.Field[Any]]:
    """The flagged fields of the config nested in ``f``."""
    return _selected(sub, None, {*f.metadata.get("skip_flags", ()), *_inner_names(skip, f.name)})


def _nested_defaults(f: dataclasses.Field[Any], sub: type, skip: Collection[str]) -> dict[str, Any]:
    """Defaults of the nested flags: the outer field's default instance's values, if it has one."""
    base = _default(f)
    if not isinstance(base, sub):
        return {}
    return {g.name: getattr(base, g.name) for g in _nested_fields(f, sub, skip)}


def add_config_flags(parser: argparse.ArgumentParser | argparse._ArgumentGroup, cls: type, *,
                     only: Collection[str] | None = None, skip: Collection[str] = (),
                     rename: Mapping[str, str] | None = None, defaults: Mapping[str, Any] | None = None,
                     helps: Mapping[str, str] | None = None, record: bool = False,
                     dest_prefix: str = "") -> list[str]:
    """Add one flag per field of the dataclass ``cls`` (``only`` those, minus ``skip``).

    ``rename`` spells some flags otherwise (besides :data:`FLAG_NAMES`), ``defaults`` and
    ``helps`` replace a field's default and help text for this command. The destination of every
    flag is ``dest_prefix`` + its field name (a prefix lets two configs with a field of the same
    name share a parser; the caller then reads those back itself); a nested config's fields (see
    the module docstring) are added in its place. ``record=True`` notes which flags are typed (:func:`given_flags`). Returns the names
    of the fields given flags (nested ones dotted: ``team.n_agents``).

    Raises:
        TypeError: a selected field has a type with no generated flag (a programming error).
    """
    hints = typing.get_type_hints(cls)
    added: list[str] = []
    for f in _selected(cls, only, skip):
        sub = _nested_class(hints[f.name])
        if sub is not None:
            inner = add_config_flags(parser, sub, skip={g.name for g in dataclasses.fields(sub)}
                                     - {g.name for g in _nested_fields(f, sub, skip)},
                                     rename=rename, record=record, helps=_inner(helps, f.name), dest_prefix=dest_prefix,
                                     defaults={**_nested_defaults(f, sub, skip), **_inner(defaults, f.name)})
            added += [f"{f.name}.{name}" for name in inner]
            continue
        kind = _kind(hints[f.name], f"{cls.__name__}.{f.name}")
        default = (defaults or {}).get(f.name, _default(f))
        text = (helps or {}).get(f.name) or f.metadata.get("help", "")
        choices = f.metadata.get("choices", kind.choices)
        flag = flag_of(f.name, rename)
        names = [flag, *f.metadata.get("aliases", ())]
        metavar = f.metadata.get("metavar", flag[2:].replace("-", "_").upper())
        options: dict[str, Any] = {"dest": dest_prefix + f.name}
        if default is dataclasses.MISSING:
            options["required"] = True
        else:
            options["default"] = default
            shown = not (default is None or isinstance(default, bool) or default in ((), ""))
            if shown and "default" not in text:
                text = f"{text} (default {_show(default)})" if text else f"default {_show(default)}"
        if kind.is_bool:
            # A recorded command (``--from RUN_DIR``) may restore True from the folder, so it
            # needs ``--no-x`` whatever the default is.
            action: Any = _Optional if record else (
                argparse.BooleanOptionalAction if default is True else "store_true")
            parser.add_argument(*names, action=action, help=text, **options)
        elif kind.many:
            parser.add_argument(*names, action=_Items, nargs="+", convert=kind.convert, record=record,
                                type_name=kind.name, metavar=metavar, help=text, **options)
        else:
            parser.add_argument(*names, type=kind.convert, choices=choices, help=text,
                                action=_Store if record else "store",
                                metavar=None if choices else metavar, **options)
        added.append(f.name)
    return added


def nested_values(cls: type, name: str, args: argparse.Namespace, *, skip: Collection[str] = ()) -> dict[str, Any]:
    """The parsed flags of the config nested in field ``name`` of ``cls``, None ones left out
    (a flag left at None means "not given": the config's own default applies)."""
    f = next(g for g in dataclasses.fields(cls) if g.name == name)
    sub = _nested_class(typing.get_type_hints(cls)[name])
    if sub is None:
        raise TypeError(f"{cls.__name__}.{name} holds no config dataclass")
    return {g.name: getattr(args, g.name) for g in _nested_fields(f, sub, skip)
            if getattr(args, g.name, None) is not None}


def config_from_args(cls: type, args: argparse.Namespace, *, only: Collection[str] | None = None,
                     skip: Collection[str] = (), **overrides: Any) -> Any:
    """``cls`` built from the parsed flags of its fields (``only``/``skip`` as when they were
    added), with ``overrides`` on top. A nested config is built from its own flags on the outer
    field's default instance. The config's own checks run (ConfigError on bad values)."""
    hints = typing.get_type_hints(cls)
    values: dict[str, Any] = {}
    for f in _selected(cls, only, skip):
        sub = _nested_class(hints[f.name])
        if f.name in overrides:
            continue
        if sub is None:
            if hasattr(args, f.name):
                values[f.name] = getattr(args, f.name)
            continue
        inner = nested_values(cls, f.name, args, skip=skip)
        base = _default(f)
        values[f.name] = dataclasses.replace(base, **inner) if isinstance(base, sub) else sub(**inner)
    values.update(overrides)
    return cls(**values)


def replace_given(config: Any, args: argparse.Namespace) -> Any:
    """``config`` with the fields whose flags were typed (:func:`given_flags`) set to their
    parsed values, nested configs included; every other field keeps its value. The config's
    own checks run again."""
    given = given_flags(args)
    hints = typing.get_type_hints(type(config))
    changes: dict[str, Any] = {}
    for f in dataclasses.fields(config):
        sub = _nested_class(hints[f.name]) if f.init else None
        if sub is not None:
            # Only the nested fields with flags: an outer flag of the same name (--adapters, a
            # folder) is not the nested field's (served adapter names).
            inner = {g.name: getattr(args, g.name) for g in _nested_fields(f, sub, ()) if g.name in given}
            current = getattr(config, f.name)
            if inner:
                changes[f.name] = dataclasses.replace(current, **inner) if current is not None else sub(**inner)
        elif f.init and f.name in given:
            changes[f.name] = getattr(args, f.name)
    return dataclasses.replace(config, **changes) if changes else config


def config_argv(cls: type, values: Mapping[str, Any], *, always: Collection[str] = (),
                rename: Mapping[str, str] | None = None, defaults: Mapping[str, Any] | None = None) -> list[str]:
    """The flags that reproduce ``values`` (field name -> value) of ``cls``'s fields, in field
    order: the fields in ``always``, and every other one that differs from its default
    (``defaults`` replaces some, as for :func:`add_config_flags`). A nested config's value is
    its instance; its flagged fields are written the same way (dotted names in ``always`` and
    ``defaults``)."""
    hints = typing.get_type_hints(cls)
    argv: list[str] = []
    for f in dataclasses.fields(cls):
        if f.name not in values:
            continue
        sub = _nested_class(hints[f.name])
        if sub is not None and values[f.name] is not None:
            inner = values[f.name]
            names = [g.name for g in _nested_fields(f, sub, ())]
            argv += config_argv(sub, {n: getattr(inner, n) for n in names}, always=_inner_names(always, f.name),
                                rename=rename,
                                defaults={**_nested_defaults(f, sub, ()), **_inner(defaults, f.name)})
            continue
        value, default = values[f.name], (defaults or {}).get(f.name, _default(f))
        if value is None or (f.name not in always and value == default):
            continue
        flag = flag_of(f.name, rename)
        if value is True:
            argv.append(flag)
        elif value is False:
            if default is True:
                argv.append("--no-" + flag[2:])
        else:
            argv += [flag, _show(value)]
    return argv


def field_defaults(cls: type, names: Collection[str]) -> dict[str, Any]:
    """``{field: default}`` of the dataclass ``cls``'s fields ``names``."""
    return {f.name: _default(f) for f in _selected(cls, names, ())}


def changed_flags(args: argparse.Namespace, defaults: Mapping[str, Any], *,
                rename: Mapping[str, str] | None = None) -> list[str]:
    """The flags of ``defaults`` (destination -> default value) parsed to another value, i.e.
    given on the command line (a flag given its default value changes nothing either way)."""
    return [flag_of(dest, rename) for dest, default in defaults.items() if getattr(args, dest, default) != default]


def refuse_ignored(flags: Collection[str], why: str) -> None:
    """Flags the command would silently ignore are an error (one ``error:`` line, exit 2):
    ``--x and --y would be ignored WHY``."""
    if flags:
        raise ConfigError(f"{' and '.join(flags)} would be ignored {why}")
