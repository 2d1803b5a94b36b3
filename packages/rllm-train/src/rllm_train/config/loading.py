"""Building a config: the defaults, then a YAML file, then dotted ``section.key=value`` overrides.

Every key is checked against the section dataclasses and every value against the field's type
as it is set, so an error names the bad key; :func:`build_config` then validates the whole.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from pathlib import Path
from typing import Any

import yaml
from rllm_agents.run_folder import write_atomic

from rllm_train.config.sections import ConfigError, TrainConfig
from rllm_train.config.validation import validate

SHIPPED_CONFIGS = Path(__file__).parent.parent / "configs"  # --config NAME finds NAME.yaml here


def _field_types(cls: type) -> dict[str, Any]:
    hints = typing.get_type_hints(cls)
    return {f.name: hints[f.name] for f in dataclasses.fields(cls)}


def _coerce(key: str, value: Any, annotation: Any) -> Any:
    """`value` as the field's type, or a ConfigError naming `key`."""
    origin = typing.get_origin(annotation)
    if origin in (typing.Union, types.UnionType):
        options = [a for a in typing.get_args(annotation) if a is not type(None)]
        if value is None:
            return None
        for option in options[:-1]:  # the first type that takes the value (float | str: 2.0)
            try:
                return _coerce(key, value, option)
            except ConfigError:
                continue
        return _coerce(key, value, options[-1])
    if origin is dict or annotation is dict:
        if isinstance(value, str):
            value = read_yaml(value, key) if value.strip() else {}
        if not isinstance(value, dict):
            raise ConfigError(f"{key}: expected a mapping, got {value!r}")
        return dict(value)
    if origin is list:
        if isinstance(value, str):
            value = [part.strip() for part in value.split(",") if part.strip()]
        elif isinstance(value, (int, float)) and not isinstance(value, bool):
            value = [value]  # branch_turns=2: a list of one
        if not isinstance(value, (list, tuple)):
            raise ConfigError(f"{key}: expected a list, got {value!r}")
        item_type = (typing.get_args(annotation) or (Any,))[0]
        if item_type in (int, float, str):  # "1,2" from the command line: numbers, not text
            return [_coerce(key, item, item_type) for item in value]
        return list(value)
    if annotation is bool:
        if isinstance(value, bool):
            return value
        words = {"true": True, "yes": True, "1": True, "false": False, "no": False, "0": False}
        if str(value).lower() in words:
            return words[str(value).lower()]
        raise ConfigError(f"{key}: expected true or false, got {value!r}")
    if annotation in (int, float):
        if isinstance(value, bool):
            raise ConfigError(f"{key}: expected a number, got {value!r}")
        try:
            number = float(value)
        except (TypeError, ValueError):
            raise ConfigError(f"{key}: expected a number, got {value!r}") from None
        if annotation is int:
            if not number.is_integer():
                raise ConfigError(f"{key}: expected an integer, got {value!r}")
            return int(number)
        return number
    if annotation is str:
        if isinstance(value, (dict, list)):
            raise ConfigError(f"{key}: expected text, got {value!r}")
        if isinstance(value, bool):
            # YAML reads a bare `off`/`on` (and `no`/`yes`) as a boolean: for a text setting
            # such as verl.rollout_is=off that is the switch's word, not "False".
            return "on" if value else "off"
        return str(value)
    return value


def _set(config: TrainConfig, dotted: str, value: Any) -> None:
    section_name, _, key = dotted.partition(".")
    sections = _field_types(TrainConfig)
    if section_name not in sections:
        raise ConfigError(
            f"unknown config key {dotted!r}: no section {section_name!r} "
            f"(sections: {', '.join(sections)})"
        )
    _set_in(getattr(config, section_name), section_name, key, value, dotted)


def _set_in(section: Any, where: str, key: str, value: Any, dotted: str) -> None:
    """Set `key` (maybe dotted further) of `section`, the part of the config `where` names."""
    fields = _field_types(type(section))
    name, _, rest = key.partition(".")
    if name not in fields:
        raise ConfigError(f"unknown config key {dotted!r}; {where} has: {', '.join(fields)}")
    if dataclasses.is_dataclass(fields[name]):  # a section inside a section
        inner, inner_where = getattr(section, name), f"{where}.{name}"
        if rest:
            _set_in(inner, inner_where, rest, value, dotted)
            return
        if isinstance(value, str):
            value = read_yaml(value, dotted) if value.strip() else {}
        if not isinstance(value, dict):
            raise ConfigError(f"{dotted}: expected a mapping of its keys, got {value!r}")
        for inner_key, inner_value in value.items():
            _set_in(inner, inner_where, str(inner_key), inner_value, f"{dotted}.{inner_key}")
        return
    if rest:  # a key inside a mapping field, e.g. env.kwargs.max_turns=4
        if typing.get_origin(fields[name]) is not dict:
            raise ConfigError(f"unknown config key {dotted!r}: {where}.{name} is not a mapping")
        getattr(section, name)[rest] = read_yaml(value, dotted) if isinstance(value, str) else value
        return
    setattr(section, name, _coerce(dotted, value, fields[name]))


def _flatten(data: dict[str, Any], where: str) -> list[tuple[str, Any]]:
    pairs = []
    for section, values in data.items():
        if not isinstance(values, dict):
            raise ConfigError(f"{where}: {section!r} must be a section (a mapping of keys)")
        pairs.extend((f"{section}.{key}", value) for key, value in values.items())
    return pairs


def parse_override(text: str) -> tuple[str, Any]:
    """``"trainer.lr=1e-5"`` -> ("trainer.lr", 1e-5) (the value read as YAML)."""
    key, sep, raw = text.partition("=")
    if not sep or not key.strip():
        raise ConfigError(f"override {text!r} is not of the form section.key=value")
    return key.strip(), read_yaml(raw, f"override {text!r}") if raw.strip() else ""


def read_yaml(text: str, where: str) -> Any:
    """`text` parsed as YAML, or a one-line ConfigError saying where and what is wrong."""
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as error:
        mark = getattr(error, "problem_mark", None)
        at = f" (line {mark.line + 1}, column {mark.column + 1})" if mark else ""
        problem = getattr(error, "problem", None) or type(error).__name__
        raise ConfigError(f"{where}: not valid YAML{at}: {problem}") from None


def config_file(name: str | Path) -> Path:
    """The YAML file `name` names: a path, or the name of a config shipped with rllm-train."""
    path = Path(name)
    if path.is_file():
        return path
    shipped = SHIPPED_CONFIGS / f"{name}.yaml"
    if shipped.is_file():
        return shipped
    names = ", ".join(sorted(p.stem for p in SHIPPED_CONFIGS.glob("*.yaml")))
    raise ConfigError(f"config file not found: {path} (shipped configs: {names or 'none'})")


def build_config(
    yaml_path: str | Path | None = None,
    overrides: list[str | tuple[str, Any]] | dict[str, Any] | None = None,
) -> TrainConfig:
    """Defaults, then the YAML file, then the overrides (``"key=value"`` texts, read as YAML,
    or ``(key, value)`` pairs taken as they are), in order; validated."""
    config = TrainConfig()
    if yaml_path is not None:
        path = config_file(yaml_path)
        data = read_yaml(path.read_text(encoding="utf-8"), str(path)) or {}
        if not isinstance(data, dict):
            raise ConfigError(f"{path}: expected a mapping of sections at the top level")
        for key, value in _flatten(data, str(path)):
            _set(config, key, value)
    if isinstance(overrides, dict):
        pairs = list(overrides.items())
    else:
        pairs = [
            item if isinstance(item, tuple) else parse_override(item) for item in overrides or []
        ]
    for key, value in pairs:
        _set(config, key, value)
    validate(config)
    return config


def from_mapping(sections: Any) -> TrainConfig:
    """A config from a mapping of sections - a plain dict, or the DictConfig a
    ``@hydra.main(config_path="pkg://rllm_train.config", config_name="agent_trainer")`` entry
    point receives (its command-line overrides already applied by Hydra); validated."""
    if not isinstance(sections, dict):
        from omegaconf import OmegaConf

        sections = OmegaConf.to_container(sections, resolve=True)
    return build_config(overrides=dict(_flatten(dict(sections), "config")))


def get_value(config: TrainConfig, dotted: str) -> Any:
    section, _, key = dotted.partition(".")
    return getattr(getattr(config, section), key)


def save_config(config: TrainConfig, path: Path) -> None:
    # Rewritten on every resume: a kill mid-write must leave the old file whole.
    write_atomic(path, yaml.safe_dump(config.to_dict(), sort_keys=False))
