"""Every part of the apps has its place in pyproject.toml's layers contracts: the contracts name packages,
so a module added inside one is covered as it comes, but a package or module right under an app (or a new
app) that no layer names is checked by none of them, so it must be placed (or this test fails)."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
# Django's configuration, read by Django itself rather than imported by the layers.
CONFIGURATION = {"apps", "migrations", "settings", "settings_test"}


def _layers_contracts() -> list[dict[str, Any]]:
    with (ROOT / "pyproject.toml").open("rb") as file:
        contracts: list[dict[str, Any]] = tomllib.load(file)["tool"]["importlinter"]["contracts"]
    return [contract for contract in contracts if contract["type"] == "layers"]


def _names(layers: list[str]) -> set[str]:
    """The modules a contract's layers name, without the marks of optional ("(x)") or independent ("|")."""
    return {name.strip("() ") for layer in layers for name in re.split(r"[|:]", layer)}


def _children(package: str) -> list[str]:
    found = []
    for path in sorted((ROOT / package).iterdir()):
        is_module = path.suffix == ".py" and not path.name.startswith("_")
        if (is_module or (path / "__init__.py").is_file()) and path.stem not in CONFIGURATION:
            found.append(path.stem)
    return found


def test_every_package_of_the_project_is_in_the_apps_layers() -> None:
    with (ROOT / "pyproject.toml").open("rb") as file:
        roots = tomllib.load(file)["tool"]["importlinter"]["root_packages"]
    (apps,) = [contract for contract in _layers_contracts() if "containers" not in contract]
    # The model server runs in a process of its own and imports nothing of the app (its own contract).
    unplaced = [root for root in roots if root != "modelserver" and root not in _names(apps["layers"])]
    assert not unplaced, f"not in the apps' layers contract: {unplaced}"


def test_every_part_right_under_an_app_is_in_its_layers() -> None:
    unplaced = []
    for contract in _layers_contracts():
        placed = _names(contract["layers"])
        for container in contract.get("containers", []):
            unplaced += [f"{container}.{child}" for child in _children(container) if child not in placed]
    assert not unplaced, f"not in any layer of pyproject.toml's layers contracts: {unplaced}"


def test_each_app_with_code_has_a_layers_contract() -> None:
    contained = {container for contract in _layers_contracts() for container in contract.get("containers", [])}
    with (ROOT / "pyproject.toml").open("rb") as file:
        roots = tomllib.load(file)["tool"]["importlinter"]["root_packages"]
    # contextmgr holds migrations only; the engine and the model server have their own contracts.
    assert contained == {root for root in roots if root not in {"contextmgr", "engine", "modelserver"}}
    assert _children("contextmgr") == []
