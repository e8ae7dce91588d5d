"""The code's layout: dependencies run one way (parsers -> trends -> site), transforms stay
pure, every package says what it holds, and the CLI only parses arguments."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _modules(package: str) -> list[Path]:
    return sorted((ROOT / package).rglob("*.py"))


def _imports(path: Path) -> set[str]:
    """Every module a file imports, at any depth (deferred imports count too)."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
            names.update(f"{node.module}.{a.name}" for a in node.names)
    return names


def _name(path: Path) -> str:
    return ".".join(path.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__")


# package -> module prefixes it must never import
FORBIDDEN = {
    "transforms": ("prefect", "duckdb", "flows", "fsspec", "s3fs"),
    "transforms.parsers": ("transforms.trends", "transforms.site", "transforms.parse", "transforms.layout"),
    "transforms.trends": ("transforms.parsers", "transforms.site", "transforms.parse", "transforms.reading"),
    "transforms.site": ("transforms.parsers", "transforms.parse", "transforms.reading"),
    "transforms.records": ("transforms",),
    "transforms.escape": ("transforms",),
}


@pytest.mark.parametrize("path", _modules("transforms"), ids=lambda p: str(p.relative_to(ROOT)))
def test_transforms_imports_run_one_way(path):
    name = _name(path)
    rules = [bad for pkg, bads in FORBIDDEN.items() if name == pkg or name.startswith(pkg + ".") for bad in bads]
    wrong = sorted(i for i in _imports(path) if not i.startswith(name)
                   and any(i == bad or i.startswith(bad + ".") for bad in rules))
    assert not wrong, f"{name} imports {wrong}"


@pytest.mark.parametrize("package", ["transforms", "transforms/parsers", "transforms/trends", "transforms/site",
                                     "flows", "flows/warehouse"])
def test_every_package_says_what_it_holds_and_may_import(package):
    doc = ast.get_docstring(ast.parse((ROOT / package / "__init__.py").read_text(encoding="utf-8")))
    assert doc and "import" in doc and len(doc.splitlines()) >= 3


def test_cli_only_parses_arguments_and_calls_flows():
    imports = _imports(ROOT / "flows" / "cli.py")
    outside = sorted(i for i in imports if i.split(".")[0] in {"duckdb", "polars", "transforms", "prefect", "rich"})
    assert not outside, f"flows/cli.py reaches past the flows: {outside}"
    assert "execute(" not in (ROOT / "flows" / "cli.py").read_text(encoding="utf-8")


def test_the_guard_sees_a_wrong_import(tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text("def f():\n    from transforms.parsers import xla_hlo\n")
    assert "transforms.parsers" in _imports(bad)
