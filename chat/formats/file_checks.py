"""The checks of a file an import reads, shared by the session file (``chat.formats.session_file``) and the archive
(``chat.formats.archive_file``): text the database can store, numbers within their ranges, free JSON of bounded
nesting, ISO 8601 times, and the problems of a refused file said in its own words
(``file.messages[3].role: must be a string``)."""

from __future__ import annotations

import json
import math
from datetime import UTC, datetime
from types import UnionType
from typing import Annotated, Any, TypeVar, Union, get_args, get_origin

import annotated_types
import pydantic
from django.core.exceptions import ValidationError
from pydantic import AfterValidator, Field
from pydantic_core import ErrorDetails, PydanticCustomError

from chat.models import MAX_MESSAGE_CHARS
from engine.core.config import MAX_CONTEXT_TOKENS
from engine.core.text import UNSTORABLE_CHARS

# The largest file an import reads and the largest body the drop-in endpoints read, in bytes (below
# Django's 2.5 MB request body cap).
MAX_IMPORT_BYTES = 2 * 1024 * 1024
# Objects and arrays inside one another, counted from the top of the file; a tool call's args and
# result are free JSON.
MAX_IMPORT_DEPTH = 20
# A drop-in body's tool schemas (JSON Schema, which nests an object's properties two levels per level) may
# go this deep, counted from the top of the body; the body's size still bounds them (issue 49, item 7).
MAX_TOOL_SCHEMA_DEPTH = 64
MAX_TIMESTAMP_CHARS = 64
# The error type of a file with more than MAX_IMPORT_ENTRIES entries (the import answers 413).
TOO_MANY_ENTRIES = "too_many_entries"
# A file with many problems is described by its first few.
MAX_REPORTED_PROBLEMS = 3

Document = TypeVar("Document", bound=pydantic.BaseModel)

# The ranges of the numbers a file gives: each stored number fits its column in every database Django
# supports (a PositiveIntegerField holds 0..2**31-1 everywhere, a PositiveBigIntegerField 64 bits), and none
# is absurd for what it counts, so that no page doing arithmetic on it can fail.
MAX_STORED_INT = 2**31 - 1
MAX_STORED_BIG_INT = 2**63 - 1
MAX_STORED_SMALL_INT = 2**15 - 1
# A token is at least one byte of UTF-8, a character at most four.
MAX_MESSAGE_TOKENS = 4 * MAX_MESSAGE_CHARS
# Compressions of one session: at most one a turn, far beyond the turns of any session a file can hold.
MAX_COMPRESSIONS = 1_000_000
# A model's parameters, in billions.
MAX_PARAMETER_SIZE_B = 100_000.0

Count = Annotated[int, Field(ge=0, le=MAX_STORED_INT)]
Ref = Annotated[int, Field(gt=0, le=MAX_STORED_INT)]
BigCount = Annotated[int, Field(ge=0, le=MAX_STORED_BIG_INT)]
SmallCount = Annotated[int, Field(ge=0, le=MAX_STORED_SMALL_INT)]
ContextTokens = Annotated[int, Field(gt=0, le=MAX_CONTEXT_TOKENS)]
MessageTokens = Annotated[int, Field(ge=0, le=MAX_MESSAGE_TOKENS)]
Compressions = Annotated[int, Field(ge=0, le=MAX_COMPRESSIONS)]
# A reliability score or a retention.
Share = Annotated[float, Field(ge=0.0, le=1.0, allow_inf_nan=False)]
ParameterSize = Annotated[float, Field(gt=0.0, le=MAX_PARAMETER_SIZE_B, allow_inf_nan=False)]


def _bounds(annotation: Any) -> tuple[list[Any], bool]:
    """The range constraints (annotated_types' Ge, Gt, Le) inside a field's type, and whether None may stand."""
    found: list[Any] = []
    optional = annotation is type(None)
    if get_origin(annotation) is Annotated:
        for extra in get_args(annotation)[1:]:
            found += getattr(extra, "metadata", [])
        inner, inner_optional = _bounds(get_args(annotation)[0])
        return found + inner, optional or inner_optional
    for arg in get_args(annotation) if get_origin(annotation) in (Union, UnionType) else ():
        inner, inner_optional = _bounds(arg)
        found += inner
        optional = optional or inner_optional
    return found, optional


def _bound(constraints: list[Any], kind: type[Any], name: str) -> float | None:
    """A bound as it was written: a whole one stays exact (2**63 - 1 is no float)."""
    found = next((getattr(c, name) for c in constraints if isinstance(c, kind)), None)
    return found if isinstance(found, int | float) else None


def _into_range(value: float, constraints: list[Any], optional: bool) -> float | None:
    low = _bound(constraints, annotated_types.Ge, "ge")
    above = _bound(constraints, annotated_types.Gt, "gt")
    high = _bound(constraints, annotated_types.Le, "le")
    if isinstance(value, float) and math.isnan(value):
        return None if optional else (low if low is not None else above)
    if high is not None and value > high:
        return type(value)(high)
    if low is not None and value < low:
        return type(value)(low)
    if above is not None and value <= above:
        if optional:
            return None
        return int(above) + 1 if isinstance(value, int) else math.nextafter(above, math.inf)
    return value


def within_ranges(model: type[pydantic.BaseModel], values: dict[str, Any]) -> dict[str, Any]:
    """``values`` of ``model``'s fields with every number brought into its field's range (a NaN, or one at or
    below a bound it must exceed, is None where None may stand): what an export writes of a stored number an
    older release or a hand left outside it, so that the export never fails and its file imports again."""
    ranged = dict(values)
    for name, value in values.items():
        field = model.model_fields.get(name)
        if field is None or isinstance(value, bool) or not isinstance(value, int | float):
            continue
        constraints, optional = _bounds(field.annotation)
        constraints += field.metadata
        if constraints:
            ranged[name] = _into_range(value, constraints, optional or field.default is None)
    return ranged


class LongNumber:
    """A whole number in the file too long to read (Python reads at most ``sys.get_int_max_str_digits()``
    digits): the parser keeps its length, and the model refuses it at its place, whatever the field."""

    def __init__(self, digits: int) -> None:
        self.digits = digits

    def __repr__(self) -> str:
        return f"LongNumber({self.digits})"

    def describe(self) -> str:
        return f"is a number of {self.digits:,} digits, too long to read"


class ImportTooLarge(ValidationError):
    """The file is over MAX_IMPORT_BYTES (or holds more than MAX_IMPORT_ENTRIES entries)."""


def _whole_number(text: str) -> int | LongNumber:
    """A whole number of the file; one too long for Python to read is kept as a LongNumber, which the model
    refuses at its place (json.loads alone would fail without saying where)."""
    try:
        return int(text)
    except ValueError:
        return LongNumber(len(text.lstrip("-")))


def _finite(text: str) -> float:
    number = float(text)
    if not math.isfinite(number):
        raise ValueError(f"{text} is beyond the range of a number")
    return number


def _no_constant(text: str) -> Any:
    raise ValueError(f"{text} is not a JSON number")


def _nesting(value: Any) -> int:
    """How many objects and arrays deep ``value`` goes (0 for a string or a number), without recursion."""
    deepest, stack = 0, [(value, 0)]
    while stack:
        item, depth = stack.pop()
        children = item.values() if isinstance(item, dict) else item if isinstance(item, list) else None
        if children is not None:
            deepest = max(deepest, depth + 1)
            stack.extend((child, depth + 1) for child in children)
    return deepest


def json_load(raw: bytes, *, what: str, checked: bool = True) -> Any:
    """The JSON ``raw`` holds, within the REST API's limits, for the import and the drop-in endpoints alike:
    ImportTooLarge over MAX_IMPORT_BYTES, ValidationError for bytes that are not JSON or are nested more than
    MAX_IMPORT_DEPTH levels deep (``what`` names them: "file", "body").

    ``checked``: a model checks the value next (the import's), so a number too long to read is kept as a
    LongNumber and NaN and Infinity as Python reads them, for the model to refuse where they stand; without
    one (a drop-in body) they are refused here, with any nesting deeper than MAX_IMPORT_DEPTH, except in its
    tool schemas, which may reach MAX_TOOL_SCHEMA_DEPTH."""
    if len(raw) > MAX_IMPORT_BYTES:
        raise ImportTooLarge(f"The {what} is {len(raw):,} bytes; the limit is {MAX_IMPORT_BYTES:,}.")
    deep = ValidationError(f"The {what} is nested more than {MAX_IMPORT_DEPTH} levels deep.")
    try:
        if checked:
            value = json.loads(raw, parse_int=_whole_number)
        else:
            value = json.loads(raw, parse_float=_finite, parse_constant=_no_constant)
    except RecursionError:
        raise deep from None
    except (UnicodeDecodeError, ValueError) as exc:
        raise ValidationError(f"The {what} is not JSON: {exc}") from exc
    if not checked:
        rest, schemas = _tool_schemas_apart(value)
        if _nesting(rest) > MAX_IMPORT_DEPTH:
            raise deep
        if any(start + _nesting(schema) > MAX_TOOL_SCHEMA_DEPTH for start, schema in schemas):
            raise ValidationError(
                f"A tool's parameters in the {what} are nested more than {MAX_TOOL_SCHEMA_DEPTH} levels deep."
            )
    return value


def _tool_schemas_apart(body: Any) -> tuple[Any, list[tuple[int, Any]]]:
    """A drop-in body without its tool schemas (``tools[].function.parameters``, the deprecated
    ``functions[].parameters``, each left as ``{}``), and the schemas with the depth each starts at (the
    body, ``tools``, a tool, its ``function``: 4; 3 for ``functions``): an ordinary tool's schema nests
    deeper than the rest of a request needs to, so it has a depth cap of its own."""
    if not isinstance(body, dict):
        return body, []
    schemas: list[tuple[int, Any]] = []
    rest = dict(body)
    for key in ("tools", "functions"):
        tools = body.get(key)
        if not isinstance(tools, list):
            continue
        kept: list[Any] = []
        for tool in tools:
            holder = tool.get("function") if key == "tools" and isinstance(tool, dict) else tool
            if isinstance(holder, dict) and "parameters" in holder:
                schemas.append((4 if key == "tools" else 3, holder["parameters"]))
                holder = {**holder, "parameters": {}}
                tool = {**tool, "function": holder} if key == "tools" else holder
            kept.append(tool)
        rest[key] = kept
    return rest, schemas


def storable(value: str) -> str:
    if UNSTORABLE_CHARS.search(value):
        raise PydanticCustomError("unstorable", "holds a NUL character or an unpaired surrogate")
    return value


def iso_time(value: Any) -> Any:
    """An ISO 8601 time, in UTC; one without a zone is UTC."""
    if isinstance(value, datetime):
        moment = value
    elif not isinstance(value, str):
        raise PydanticCustomError("string_type", "must be a string")
    elif len(value) > MAX_TIMESTAMP_CHARS:
        raise PydanticCustomError("string_too_long", "too long", {"max_length": MAX_TIMESTAMP_CHARS})
    else:
        try:
            moment = datetime.fromisoformat(value)
        except ValueError:
            raise PydanticCustomError("iso_time", "{text} is not an ISO 8601 time", {"text": repr(value)}) from None
    if moment.tzinfo is None:
        return moment.replace(tzinfo=UTC)
    try:
        return moment.astimezone(UTC)
    except OverflowError:  # 0001-01-01T00:00+01:00 is before the first UTC moment Python has
        raise PydanticCustomError("iso_time", "{text} is out of range", {"text": repr(value)}) from None


def _not_json_number(value: float) -> str:
    """NaN, Infinity and -Infinity (or a number such as 1e400 that Python reads as infinite) are not JSON;
    Python's parser accepts them but the database refuses them."""
    text = "NaN" if math.isnan(value) else ("Infinity" if value > 0 else "-Infinity")
    return f"holds {text}, which is not a JSON number"


def check_json(value: Any, depth: int, *, precise: bool = True, path: str = "") -> None:
    """Free JSON ``depth`` levels below the top of the file: bounded nesting, storable strings (keys too),
    finite numbers of a readable length. ``precise``: a problem says where in the value it stands
    (``path``) and which number is not JSON; the archive's problems have always said neither."""
    at = {"at": f" (at {path})" if precise and path else ""}
    if depth > MAX_IMPORT_DEPTH:
        raise PydanticCustomError(
            "json_depth", "nested more than {limit} levels deep{at}", {"limit": MAX_IMPORT_DEPTH, **at}
        )
    if isinstance(value, LongNumber):
        raise PydanticCustomError("long_number", "{problem}{at}", {"problem": value.describe(), **at})
    if isinstance(value, float) and not math.isfinite(value):
        problem = _not_json_number(value) if precise else "holds a number that is not a JSON number"
        raise PydanticCustomError("not_json", "{problem}{at}", {"problem": problem, **at})
    if isinstance(value, str):
        if UNSTORABLE_CHARS.search(value):
            raise PydanticCustomError("unstorable", "holds a NUL character or an unpaired surrogate{at}", at)
    elif isinstance(value, dict):
        for key, item in value.items():
            check_json(key, depth + 1, precise=precise, path=f"{path} key")
            check_json(item, depth + 1, precise=precise, path=f"{path}.{key}"[:200])
    elif isinstance(value, list):
        for index, item in enumerate(value):
            check_json(item, depth + 1, precise=precise, path=f"{path}[{index}]")


def free_json(depth: int, *, precise: bool = True) -> AfterValidator:
    """JSON stored as it is, ``depth`` levels below the top of the file (see ``check_json``)."""

    def check(value: Any) -> Any:
        check_json(value, depth, precise=precise)
        return value

    return AfterValidator(check)


def _where(loc: tuple[int | str, ...], document: str) -> str:
    """``("messages", 0, "role")`` as ``file.messages[0].role``."""
    return document + "".join(f"[{part}]" if isinstance(part, int) else f".{part}" for part in loc)


def _problem(error: ErrorDetails, document: str) -> str:
    """What is wrong, in the words of the file: the JSON types, not Python's."""
    kind, ctx, value = error["type"], error.get("ctx", {}), error.get("input")
    if isinstance(value, LongNumber):
        return value.describe()
    if kind == "missing":
        return "is required"
    if kind == "extra_forbidden":
        return f"is not a field of the {document}"
    if kind == "string_type":
        return "must be a string"
    if kind == "list_type":
        return "must be a list"
    if kind in ("dict_type", "model_type", "model_attributes_type"):
        return "must be an object"
    if kind in ("int_type", "int_parsing", "int_from_float"):
        return "must be a whole number"
    if kind == "bool_type":
        return "must be true or false"
    if kind == "float_type":
        return "must be a number"
    if kind == "greater_than":
        return f"must be greater than {ctx['gt']}"
    if kind == "greater_than_equal":
        return f"must be at least {ctx['ge']}"
    if kind == "less_than_equal":
        return f"must be at most {ctx['le']:,}"
    if kind == "finite_number":
        return "must be a finite number"
    if kind == "literal_error":
        expected = str(ctx.get("expected", "")).replace("'", '"')
        return f"must be one of {expected}" if " or " in expected else f"must be {expected}"
    if kind == "string_too_long" and isinstance(value, str):
        return f"is {len(value):,} characters long; the limit is {ctx['max_length']:,}"
    return error["msg"]


def validated(model: type[Document], data: Any, *, document: str, too_large: type[ValidationError]) -> Document:
    """``data`` checked completely as ``model``; a ValidationError names each problem's place in the
    ``document`` (``file.messages[3].role``), ``too_large`` one with too many entries."""
    try:
        return model.model_validate(data)
    except pydantic.ValidationError as exc:
        errors = exc.errors(include_url=False)
        too_many = next((e for e in errors if e["type"] == TOO_MANY_ENTRIES), None)
        if too_many is not None:
            raise too_large(too_many["msg"]) from None
        problems = [f"{_where(e['loc'], document)}: {_problem(e, document)}" for e in errors[:MAX_REPORTED_PROBLEMS]]
        if len(errors) > MAX_REPORTED_PROBLEMS:
            problems.append(f"and {len(errors) - MAX_REPORTED_PROBLEMS:,} more problems")
        raise ValidationError("; ".join(problems)) from None
