"""The type checks of the drop-in endpoints' fields (issue 49, item 6): each is refused, naming it, when it
has the wrong type, applied or not, rather than passed to the model or read loosely (a boolean as a number)."""

from __future__ import annotations

from typing import Any

from chat.dropin.common import TOOLS_SHAPE, DropInError


def tools_checked(tools: Any, where: str = "tools") -> None:
    """Refuse ``tools`` that are not in OpenAI's and Ollama's function shape (issue 49, item 6): each
    ``{type: "function", function: {name: text, description?: text, parameters?: object}}``; ``[1]`` or
    ``[{"type": "function"}]`` reached the model before."""
    if tools is None:
        return
    if not isinstance(tools, list):
        raise DropInError(400, f"{TOOLS_SHAPE}.")
    for index, tool in enumerate(tools):
        at = f"{where}[{index}]"
        if not isinstance(tool, dict) or tool.get("type") != "function" or not isinstance(tool.get("function"), dict):
            raise DropInError(400, f"{TOOLS_SHAPE}: {at} is not one.")
        function_checked(tool["function"], f"{at}.function")


def function_checked(function: Any, at: str) -> None:
    """A function's definition: a name (text), a description (text) and parameters (a JSON Schema object)."""
    if not isinstance(function, dict):
        raise DropInError(400, f"{at} must be an object with a name.")
    name = function.get("name")
    if not isinstance(name, str) or not name.strip():
        raise DropInError(400, f"{at}.name must be a non-empty text.")
    if not isinstance(function.get("description", ""), str):
        raise DropInError(400, f"{at}.description must be text.")
    if not isinstance(function.get("parameters", {}), dict):
        raise DropInError(400, f"{at}.parameters must be an object (a JSON Schema).")


def stop_of(value: Any, where: str) -> None:
    """Refuse a ``stop`` that is neither a text nor a list of texts (the stop strings are not applied)."""
    if value is None or isinstance(value, str):
        return
    if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
        raise DropInError(400, f"{where} must be a text or a list of texts.")


def flag_of(value: Any, where: str) -> None:
    """Refuse a field that must be true or false (``stream``…) and is anything else."""
    if value is not None and not isinstance(value, bool):
        raise DropInError(400, f"{where} must be true or false.")


def text_of(value: Any, where: str) -> None:
    """Refuse a field that must be text and is anything else."""
    if value is not None and not isinstance(value, str):
        raise DropInError(400, f"{where} must be text.")


def number_of(value: Any, where: str) -> None:
    """Refuse a field that must be a number (not a boolean) and is anything else."""
    if value is not None and (isinstance(value, bool) or not isinstance(value, int | float)):
        raise DropInError(400, f"{where} must be a number.")
