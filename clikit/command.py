"""`settings_command`: a typer command whose options are generated from a pydantic model's fields."""

from __future__ import annotations

import functools
import inspect
import json
import types
import typing
import weakref
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Annotated, Any, Literal, TypeVar

import typer
from pydantic import BaseModel, SecretStr, ValidationError
from pydantic.fields import FieldInfo

from clikit.errors import ClikitError

M = TypeVar("M", bound=BaseModel)
# Where each field of a command's settings came from, per settings object: a weak reference to the object
# (pydantic models are not hashable) found by identity, never by id(), so a later object that reuses an
# address never answers for an earlier one. An entry leaves with its object; a process holds a few.
_SOURCES: list[tuple[weakref.ref[BaseModel], dict[str, str]]] = []
_CTX = "clikit_context"  # typer injects the click context into a parameter of this type


class SettingsError(typer.Exit, ClikitError):
    """Raised (exit 2) after the offending options were printed."""

    def __init__(self) -> None:
        super().__init__(2)


def _env_prefix(model: type[BaseModel]) -> str:
    return str(model.model_config.get("env_prefix", "") or "")  # type: ignore[union-attr]


def _cli_type(annotation: Any) -> tuple[Any, bool]:
    """(the type typer parses, whether the option repeats) for a field's annotation."""
    origin = typing.get_origin(annotation)
    if origin in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(annotation) if a is not type(None)]
        return _cli_type(args[0]) if len(args) == 1 else (str, False)
    if origin is Literal:
        return str, False  # the model validates the choice and names the allowed values
    if origin in (list, tuple, set, frozenset):
        inner, _ = _cli_type(typing.get_args(annotation)[0])
        return inner, True
    if annotation is SecretStr:
        return str, False
    if annotation in (int, float, bool, str, Path):
        return annotation, False
    return str, False


def _help(name: str, info: FieldInfo, annotation: Any) -> str:
    text = info.description or ""
    if typing.get_origin(annotation) is Literal:
        text += f" One of: {', '.join(map(str, typing.get_args(annotation)))}."
    if info.default_factory is None and info.default is not None and not info.is_required():
        default = info.default
        shown = default.get_secret_value() and "***" if isinstance(default, SecretStr) else default
        if shown not in ((), [], ""):
            text += f" (default: {shown})"
    elif info.is_required():
        text += " (required)"
    return text.strip()


def _parameters(model: type[BaseModel], exclude: Iterable[str]) -> list[inspect.Parameter]:
    prefix = _env_prefix(model)
    params = []
    for name, info in model.model_fields.items():
        if name in exclude:
            continue
        typ, repeats = _cli_type(info.annotation)
        # Values reach the model as text, so the model (not the parser) validates them and names the source.
        metavar = {int: "INT", float: "FLOAT", Path: "PATH"}.get(typ, "TEXT")
        typ = bool if typ is bool else str
        flag = "--" + name.replace("_", "-")
        decls = [f"{flag}/--no-{name.replace('_', '-')}"] if typ is bool else [flag]
        option = typer.Option(
            *decls,
            help=_help(name, info, info.annotation),
            envvar=(prefix + name).upper() if prefix else None,
            show_default=False,
            metavar=None if typ is bool else metavar,
            show_envvar=bool(prefix),
        )
        annotation = Annotated[list[typ] | None if repeats else typ | None, option]  # type: ignore[valid-type]
        params.append(
            inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=None, annotation=annotation)
        )
    return params


def _from_env_list(value: list[Any] | tuple[Any, ...]) -> list[Any]:
    """A repeatable option from the environment arrives as one string: accept JSON (`'["a","b"]'`)."""
    # click splits an environment value on whitespace, so a JSON list with spaces arrives in pieces.
    if value and isinstance(value[0], str) and value[0].lstrip().startswith("["):
        try:
            decoded = json.loads(" ".join(value))
        except ValueError:
            return list(value)
        return decoded if isinstance(decoded, list) else list(value)
    return list(value)


def _forget(gone: weakref.ref[BaseModel]) -> None:
    _SOURCES[:] = [entry for entry in _SOURCES if entry[0] is not gone]


def source_of(settings: BaseModel, name: str) -> str:
    """Where a field's value came from: 'command line', 'environment' or 'default'."""
    sources = next((src for ref, src in _SOURCES if ref() is settings), {})
    return sources.get(name, "default")


def _report(exc: ValidationError, model: type[BaseModel], sources: dict[str, str]) -> None:
    prefix = _env_prefix(model)
    for err in exc.errors():
        name = str(err["loc"][0]) if err["loc"] else ""
        where = sources.get(name, "default")
        if where == "environment":
            where += f" {(prefix + name).upper()}"
        option = "--" + name.replace("_", "-") if name else "settings"
        typer.echo(f"error: {option} (from {where}): {err['msg']}", err=True)


def settings_command(
    model: type[M], *, exclude: Iterable[str] = ()
) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Decorate `fn(settings: M, **rest)`: the command's options are `model`'s fields plus `fn`'s own."""
    excluded = set(exclude)

    def wrap(fn: Callable[..., Any]) -> Callable[..., Any]:
        hints = typing.get_type_hints(fn, include_extras=True)  # resolves `from __future__` strings
        own = [
            p.replace(annotation=hints.get(n, p.annotation))
            for n, p in inspect.signature(fn).parameters.items()
            if n != "settings"
        ]
        generated = _parameters(model, excluded | {p.name for p in own})

        @functools.wraps(fn)
        def command(**kwargs: Any) -> Any:
            ctx: typer.Context = kwargs.pop(_CTX)
            given, sources = {}, {}
            for p in generated:
                value = kwargs.pop(p.name)
                source = ctx.get_parameter_source(p.name)
                if value is None or (isinstance(value, list | tuple) and not value and source is None):
                    continue
                given[p.name] = _from_env_list(value) if isinstance(value, list | tuple) else value
                env = source is not None and source.name == "ENVIRONMENT"
                sources[p.name] = "environment" if env else "command line"
            try:
                settings = model(**given)
            except ValidationError as exc:
                _report(exc, model, sources)
                raise SettingsError() from None
            _SOURCES.append((weakref.ref(settings, _forget), sources))
            return fn(settings, **kwargs)

        ctx_param = inspect.Parameter(_CTX, inspect.Parameter.KEYWORD_ONLY, annotation=typer.Context)
        params = [ctx_param, *(p.replace(kind=inspect.Parameter.KEYWORD_ONLY) for p in own), *generated]
        command.__signature__ = inspect.Signature(params)  # type: ignore[attr-defined]
        command.__annotations__ = {p.name: p.annotation for p in params}
        del command.__wrapped__  # typer must read the generated signature, not fn's
        return command

    return wrap
