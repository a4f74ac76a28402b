"""A stage's settings: one frozen dataclass, and what each row's key records of it.

A stage (``orbench.run.stage.Stage``) holds its settings as a frozen dataclass, and its row
functions get that object and the row and nothing else: whatever changes a row's result is a
field. Every field is recorded (:func:`recorded`) in each row's key, in the progress file's
first line and in the meta file, under its own name and with its own value, unless its
declaration (:func:`setting`, :func:`rule`) says otherwise:

- ``rule``: one of the project's own rules (a template, the keyword rules' fingerprint),
  recorded apart from what the user asked for: a change re-scores the rows in place instead of
  stopping the run (``orbench.run.existing_output``);
- ``record=f``: recorded as ``f(value)`` (a template by its hash, a model by its name);
- ``name=``: recorded under another name;
- ``omit=f``: left out when ``f(settings)`` is true (a setting earlier versions recorded only
  when it was given, so their outputs resume);
- ``unkeyed="why"``: not recorded at all, with the reason: only for a field that no row's
  result depends on, or that another field records.

So a new setting is in the key the moment it is a field, and leaving one out is written down.
How a run is carried out is not a setting at all and has no field here: the run options
(``orbench.run.lifecycle.RunOptions``: ``--concurrency``, ``--timeout``, ``--serve``, ``--serve_timeout``,
``--replicas``, ``--shard``, ...) change no row's result, so no key, progress header or settings check sees them.

A stage whose models include the embedded local model (``local/...``) also records ``engine``: the
engine that runs it and its version (``orbench.llm.providers.local.engine_id``). Its answers are
the engine's as much as the weights', so an output made by another engine (or none recorded, as
before this setting existed) is not continued as this one's: the settings guard stops.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from orbench.llm.models import ModelSpec

_NO_DEFAULT: Any = dataclasses.MISSING


def setting(default: Any = _NO_DEFAULT, *, default_factory: Any = _NO_DEFAULT, record: Callable | None = None,
            name: str | None = None, omit: Callable[[Any], bool] | None = None, unkeyed: str | None = None,
            init: bool = True, rule: bool = False) -> Any:
    """A settings field with how it is recorded (module docstring); the rest is ``dataclasses.field``."""
    if unkeyed is not None and not unkeyed.strip():
        raise ValueError("unkeyed needs the reason the field is left out of the key")
    metadata = {"record": record, "name": name, "omit": omit, "unkeyed": unkeyed, "rule": rule}
    return dataclasses.field(default=default, default_factory=default_factory, init=init, metadata=metadata)


def rule(default: Any = _NO_DEFAULT, *, default_factory: Any = _NO_DEFAULT, record: Callable | None = None,
         name: str | None = None, omit: Callable[[Any], bool] | None = None) -> Any:
    """A settings field that is one of the project's rules (module docstring)."""
    return setting(default, default_factory=default_factory, record=record, name=name, omit=omit, rule=True)


def recorded(settings: Any) -> tuple[dict, dict]:
    """What ``settings`` records: (the user's settings, the project's rules), in field order.

    ``None`` (a stage with nothing to set) records nothing.
    """
    user: dict = {}
    rules: dict = {}
    if settings is None:
        return user, rules
    for spec in dataclasses.fields(settings):
        how = spec.metadata
        if how.get("unkeyed") or (how.get("omit") and how["omit"](settings)):
            continue
        value = getattr(settings, spec.name)
        if how.get("record"):
            value = how["record"](value)
        (rules if how.get("rule") else user)[how.get("name") or spec.name] = value
    engine = local_engine(settings)
    if engine is not None:
        user["engine"] = engine
    return user, rules


def local_engine(settings: Any) -> str | None:
    """The embedded engine and its version when any model of ``settings`` runs on it, else None.

    Every field is looked at, unkeyed ones too (stage 5 keys its judges by name only).
    """
    for spec in dataclasses.fields(settings):
        value = getattr(settings, spec.name, None)
        for item in value if isinstance(value, (tuple, list)) else (value,):
            if isinstance(item, ModelSpec) and item.provider.api == "local":
                from orbench.llm.providers.local import engine_id

                return engine_id()
    return None
