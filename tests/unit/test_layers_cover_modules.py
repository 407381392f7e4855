"""Every module of the apps has its place in the layers contract of pyproject.toml: a module import-linter's
layers do not name is checked by none of them, so a new one must be placed (or this test fails)."""

from __future__ import annotations

import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
APPS = ("ollm_site", "chat", "contextmgr", "search", "accounts")
# Django's configuration, read by Django itself rather than imported by the layers.
CONFIGURATION = {"apps", "migrations", "settings", "settings_test"}


def _placed() -> set[str]:
    with (ROOT / "pyproject.toml").open("rb") as file:
        contracts = tomllib.load(file)["tool"]["importlinter"]["contracts"]
    (layers,) = [contract for contract in contracts if contract["type"] == "layers"]
    return {module.strip() for layer in layers["layers"] for module in layer.split(":")}


def _app_modules() -> list[str]:
    """The modules and packages right under each app."""
    found = []
    for app in APPS:
        for path in sorted((ROOT / app).iterdir()):
            is_module = path.suffix == ".py" and not path.name.startswith("_")
            if (is_module or (path / "__init__.py").is_file()) and path.stem not in CONFIGURATION:
                found.append(f"{app}.{path.stem}")
    return found


def test_every_module_of_the_apps_is_in_a_layer() -> None:
    placed = _placed()
    unplaced = [module for module in _app_modules() if module not in placed]
    assert not unplaced, f"not in any layer of pyproject.toml's layers contract: {unplaced}"
