"""Turn pydantic validation errors into file:line: key: problem messages with suggestions."""

from __future__ import annotations

import types
import typing

from gpufleet.errors import SpecError, SpecErrors, did_you_mean
from gpufleet.yamlsrc import Located, dotted


def _unwrap(tp):
    """The model class reached through Optional/list/dict/Annotated, or None."""
    from pydantic import BaseModel

    origin = typing.get_origin(tp)
    if origin is typing.Annotated:
        return _unwrap(typing.get_args(tp)[0])
    if origin in (list, tuple, set, dict) or origin in (typing.Union, types.UnionType):
        for a in typing.get_args(tp):
            m = _unwrap(a)
            if m is not None:
                return m
        return None
    if isinstance(tp, type) and issubclass(tp, BaseModel):
        return tp
    return None


def _model_at(cls, loc: tuple):
    """The pydantic model class that holds the last key of ``loc``."""
    cur = cls
    for key in loc[:-1]:
        if isinstance(key, int) or cur is None:
            continue
        field = cur.model_fields.get(key)
        if field is None:
            # a dict key (e.g. pillar name): stay on the dict's value model
            continue
        cur = _unwrap(field.annotation) or cur
    return cur


def validate_located(cls, located: Located, context: dict | None = None):
    """``cls.model_validate(located.data)`` with errors located in the YAML file."""
    from pydantic import ValidationError

    if not isinstance(located.data, dict):
        raise SpecError(located.path, 1, "", f"expected a mapping at the top level, got {type(located.data).__name__}",
                        "a stack file starts with keys such as `name:` and `pools:`")
    try:
        return cls.model_validate(located.data, context=context)
    except ValidationError as exc:
        raise to_spec_errors(cls, exc, located) from None


def to_spec_errors(cls, exc, located: Located) -> SpecErrors:
    errors: list[SpecError] = []
    for e in exc.errors(include_url=False):
        loc = tuple(e["loc"])
        key = dotted(loc)
        hint = None
        msg = e["msg"]
        if e["type"] == "extra_forbidden":
            model = _model_at(cls, loc)
            allowed = list(model.model_fields) if model is not None else []
            sugg = did_you_mean(str(loc[-1]), allowed)
            msg = "unknown key"
            hint = f"did you mean {sugg!r}?" if sugg else f"allowed keys here: {', '.join(allowed)}"
        elif e["type"] == "missing":
            msg = "required key is missing"
        elif e["type"] in ("literal_error", "enum"):
            expected = e.get("ctx", {}).get("expected", "")
            sugg = did_you_mean(str(e.get("input")), [x.strip(" '") for x in str(expected).replace(" or ", ",").split(",")])
            msg = f"{e.get('input')!r} is not allowed; expected {expected}"
            hint = f"did you mean {sugg!r}?" if sugg else None
        elif e["type"].startswith("value_error"):
            msg = msg.removeprefix("Value error, ")
            ctx_err = e.get("ctx", {}).get("error")
            hint = getattr(ctx_err, "hint", None)
        errors.append(SpecError(located.path, located.line(loc), key, msg, hint))
    errors.sort(key=lambda s: (s.line or 0))
    return SpecErrors(errors)
