"""Argument types shared by the action spaces, and the one-line message of an invalid action.

Each argument's rules live in its annotation (pydantic ``Field`` constraints and validators), so
construction-time validation and the guided-decoding JSON schema come from the same place.
A ``description`` on a field is what the argument must be; invalid values are reported with it
("index must be an element number >= 0, got 'B'").
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

from pydantic import AfterValidator, Field, ValidationError
from pydantic_core import ErrorDetails

if TYPE_CHECKING:
    from collabui.actions.base import Action

__all__ = ["TEXT_MAX_CHARS", "Text", "NonEmptyText", "problem"]

#: Longest free text a guided answer may write. A schema-only cap (construction accepts longer
#: text, e.g. a recorded answer): it keeps a looping model from running away inside a string.
TEXT_MAX_CHARS = 200


def _not_blank(value: str) -> str:
    # The schema says minLength 1; "   " is refused here too, since no device can use it.
    if not value.strip():
        raise ValueError("blank")
    return value


#: Free text (typed content, answers, messages); may be empty.
Text = Annotated[str, Field(json_schema_extra={"maxLength": TEXT_MAX_CHARS})]
#: Text that must say something (a URL, an option, an app name).
NonEmptyText = Annotated[str, Field(min_length=1, json_schema_extra={"maxLength": TEXT_MAX_CHARS}),
                         AfterValidator(_not_blank)]

# What a value must be, by pydantic error type, when the field has no description.
_EXPECTED = {
    "string_type": "a string",
    "string_too_short": "a non-empty string",
    "value_error": "a non-empty string",
    "bool_type": "true or false",
    "int_type": "an integer",
    "greater_than_equal": "an integer >= 0",
}


def problem(cls: type[Action], exc: ValidationError) -> str:
    """One line naming what is wrong with ``cls``'s arguments and what they must be."""
    errors = exc.errors(include_url=False)
    extra = sorted(str(e["loc"][0]) for e in errors if e["type"] == "extra_forbidden")
    if extra:
        return f"{cls.name}: unexpected argument(s) {extra}; it takes {list(cls.model_fields)}"
    error = errors[0]
    field = str(error["loc"][0]) if error["loc"] else "arguments"
    if error["type"] == "missing":
        return f"{cls.name}: missing required argument '{field}'"
    return f"{cls.name}: {field} must be {_expected(cls, field, error)}, got {error['input']!r}"


def _expected(cls: type[Action], field: str, error: ErrorDetails) -> str:
    info = cls.model_fields.get(field)
    if info is not None and info.description:
        return info.description
    if error["type"] == "literal_error":
        return str(error.get("ctx", {}).get("expected"))  # "'up' or 'down'"
    return _EXPECTED.get(error["type"], str(error["msg"]).lower())
