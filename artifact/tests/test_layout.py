"""The package's layout holds: no import cycles, each subpackage imports only what its docstring
allows, no module grows past about 400 lines, and no module finds files by counting parents.

Static (``ast``, nothing imported), so it runs in milliseconds and names the offending line.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PACKAGE = REPO / "artifact" / "dlfp"
PLUGIN = REPO / "dlfp-vllm" / "src" / "dlfp"
"""The two halves of the ``dlfp`` package: the artifact's, and the plug-in's distribution (``dlfp-vllm``)."""
PLUGIN_LAYERS = ("control", "vllm")
MAX_LINES = 420


def modules() -> dict[str, Path]:
    out = {}
    for root in (PACKAGE, PLUGIN):
        for path in sorted(root.rglob("*.py")):
            parts = path.relative_to(root.parent).with_suffix("").parts
            out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return out


def imports(path: Path, name: str) -> Iterator[tuple[int, str]]:
    """(line, imported module) for every import in ``path``, inside functions too."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*parts, base] if base else parts)
            known = modules()
            for alias in node.names:  # `from dlfp.x import y` imports module dlfp.x.y when there is one
                yield node.lineno, f"{base}.{alias.name}" if f"{base}.{alias.name}" in known else base


def graph() -> dict[str, set[str]]:
    mods = modules()
    edges: dict[str, set[str]] = {m: set() for m in mods}
    for name, path in mods.items():
        for _, target in imports(path, name):
            if target in mods and target != name and not name.startswith(target + "."):
                edges[name].add(target)
    return edges


def test_no_import_cycle_between_modules() -> None:
    edges = graph()
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(m: str) -> None:
        state[m] = 1
        stack.append(m)
        for n in sorted(edges[m]):
            if n.startswith(m + "."):  # a package importing its own submodule is not a cycle
                continue
            if state.get(n) == 1:
                cycle = [*stack[stack.index(n):], n]
                pytest.fail("import cycle: " + " -> ".join(cycle))
            if n not in state:
                visit(n)
        stack.pop()
        state[m] = 2

    for m in sorted(edges):
        if m not in state:
            visit(m)


def forbidden(init: Path) -> tuple[str, ...]:
    """The modules a subpackage's docstring says it must not import."""
    doc = ast.get_docstring(ast.parse(init.read_text())) or ""
    found = re.search(r"Must not\s+import:\s*(.+?)(?:\.\s|\.$|\s\()", doc, re.S)
    assert found, f"{init}: its docstring must say what the subpackage must not import ('Must not import: ...')"
    return tuple(x.strip() for x in found.group(1).replace("\n", " ").split(","))


SUBPACKAGES = sorted(p.parent.name for root in (PACKAGE, PLUGIN) for p in root.glob("*/__init__.py"))


@pytest.mark.parametrize("sub", SUBPACKAGES)
def test_subpackage_imports_only_what_its_docstring_allows(sub: str) -> None:
    banned = forbidden(modules()[f"dlfp.{sub}"])
    assert f"dlfp.{sub}" not in banned
    bad = []
    for name, path in modules().items():
        if name == f"dlfp.{sub}" or name.startswith(f"dlfp.{sub}."):
            for line, target in imports(path, name):
                if any(target == b or target.startswith(b + ".") for b in banned):
                    bad.append(f"{path.relative_to(PACKAGE.parent)}:{line} imports {target}")
    assert not bad, f"dlfp.{sub} must not import {banned}:\n" + "\n".join(bad)


def test_every_import_follows_the_declared_layers() -> None:
    """``dlfp.LAYERS``: no module imports from a layer above its own, function-local imports included;
    every subpackage and top-level module has a layer."""
    from dlfp import LAYERS

    bad, unlayered = [], set()
    for name, path in modules().items():
        parts = name.split(".")
        if len(parts) < 2:
            continue
        own = parts[1]
        if own not in LAYERS:
            unlayered.add(own)
            continue
        for line, target in imports(path, name):
            other = target.split(".")
            if other[0] == "dlfp" and len(other) > 1 and other[1] in LAYERS and \
                    LAYERS.index(other[1]) > LAYERS.index(own):
                bad.append(f"{path.relative_to(PACKAGE.parent)}:{line} ({own}) imports {target} ({other[1]})")
    assert not unlayered, f"not in dlfp.LAYERS: {sorted(unlayered)}"
    assert not bad, "imports against dlfp.LAYERS:\n" + "\n".join(bad)


def test_the_plug_in_is_its_own_bottom_layers_and_imports_nothing_of_the_artifact() -> None:
    """The plug-in's distribution holds exactly the bottom layers after ``paths`` and, function-local
    imports included, imports no other part of ``dlfp``: a deployer installs it without the artifact."""
    from dlfp import LAYERS

    assert sorted(p.name for p in PLUGIN.iterdir() if p.suffix == ".py" or (p / "__init__.py").is_file()) == \
        sorted(PLUGIN_LAYERS), "the plug-in holds dlfp.control and dlfp.vllm only (and no dlfp/__init__.py)"
    assert LAYERS[1:1 + len(PLUGIN_LAYERS)] == PLUGIN_LAYERS
    assert not any((PACKAGE / layer).exists() for layer in PLUGIN_LAYERS), "a plug-in layer left in the artifact"
    bad = []
    for name, path in modules().items():
        if path.is_relative_to(PLUGIN):
            for line, target in imports(path, name):
                parts = target.split(".")
                if parts[0] == "dlfp" and (len(parts) < 2 or parts[1] not in PLUGIN_LAYERS):
                    bad.append(f"{path.relative_to(REPO)}:{line} imports {target}")
    assert not bad, "the plug-in imports the artifact:\n" + "\n".join(bad)


def test_top_level_holds_only_the_entry_points_and_the_one_module_layers() -> None:
    """``paths`` and ``metrics`` are layers of one module each (:data:`dlfp.LAYERS`); nothing else sits there."""
    top = sorted(p.name for p in PACKAGE.glob("*.py"))
    assert top == ["__init__.py", "cli.py", "metrics.py", "paths.py"], top


@pytest.mark.parametrize("name", sorted(modules()))
def test_module_is_small_and_finds_files_through_paths(name: str) -> None:
    path = modules()[name]
    text = path.read_text()
    assert len(text.splitlines()) <= MAX_LINES, f"{path} has {len(text.splitlines())} lines: split it by concern"
    if name != "dlfp.paths":
        assert not re.search(r"__file__\)?(\.resolve\(\))?\.parents\[", text), \
            f"{path} counts parents of __file__: use dlfp.paths (REPO_ROOT, CONFIGS, PACKAGE)"
    doc = ast.get_docstring(ast.parse(text))
    assert doc, f"{path} has no module docstring saying what it is for"


TESTS = Path(__file__).resolve().parent
PLUGIN_TESTS = REPO / "dlfp-vllm" / "tests"
TESTED_THROUGH = {
    "dlfp.vllm.direct": "dlfp-vllm/tests/vllm/test_scheduler.py",  # the rig every scheduler test drives
    # vLLM's executors, stamped, in real engines
    "dlfp.vllm.executors": "artifact/tests/integration/test_completion_stamps_cpu.py",
    # needs a real engine core to outlive its driver
    "dlfp.harness.lifeline": "artifact/tests/integration/test_faults_cpu.py",
    "dlfp.sim.standalone": "artifact/tests/sim/test_executor.py",  # the rig the executor tests drive
    "dlfp.bench.load": "artifact/tests/integration/test_load_cpu.py",  # starts an engine core
    "dlfp.harness.result": "artifact/tests/harness/test_arm.py",  # what the arm runners return, tested with them
    # the protocol as the glue runs it; a controller registered and run
    "dlfp.control.protocol": "dlfp-vllm/tests/vllm/test_controller_protocol.py",
    "dlfp.control.registry": "dlfp-vllm/tests/vllm/test_controller_protocol.py",
}
"""Modules whose tests live in the file named here (from the repository's root), which must import them
(glue and test rigs)."""


def _test_file_of(name: str) -> Path:
    """``dlfp.a.b`` -> ``tests/a/test_b.py``; ``dlfp.b`` -> ``tests/test_b.py``, in the tests of the half
    (artifact or plug-in) that holds the module."""
    *sub, leaf = name.split(".")[1:]
    tests = PLUGIN_TESTS if modules()[name].is_relative_to(PLUGIN) else TESTS
    return tests.joinpath(*sub, f"test_{leaf}.py")


@pytest.mark.parametrize("name", sorted(n for n in modules() if modules()[n].name != "__init__.py"))
def test_every_module_has_tests_by_name(name: str) -> None:
    if name in TESTED_THROUGH:
        path = REPO / TESTED_THROUGH[name]
        assert path.is_file(), f"{name} is tested through {path}, which does not exist"
        parent, _, leaf = name.rpartition(".")
        imported = {t for _, t in imports(path, path.stem)}
        via_parent = parent in imported and re.search(rf"\b{leaf}\b", path.read_text())
        assert name in imported or via_parent, f"{path} is named as {name}'s tests but does not import it"
        return
    path = _test_file_of(name)
    assert path.is_file(), f"{name} has no tests by name: add {path.relative_to(TESTS.parent)}"
