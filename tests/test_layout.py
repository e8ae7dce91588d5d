"""The code's layout: dependencies run one way (parsers -> trends -> site; in ``flows``:
ingest -> warehouse -> verdict -> publish -> nightly -> commands -> cli), no module imports
another in a cycle, transforms stay pure, every package says what it holds, and the CLI only
parses arguments."""

from __future__ import annotations

import ast
import re
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
    "transforms.figure_bounds": ("transforms",),
    "transforms.escape": ("transforms",),
}


@pytest.mark.parametrize("path", _modules("transforms"), ids=lambda p: str(p.relative_to(ROOT)))
def test_transforms_imports_run_one_way(path):
    name = _name(path)
    rules = [bad for pkg, bads in FORBIDDEN.items() if name == pkg or name.startswith(pkg + ".") for bad in bads]
    wrong = sorted(i for i in _imports(path) if not i.startswith(name)
                   and any(i == bad or i.startswith(bad + ".") for bad in rules))
    assert not wrong, f"{name} imports {wrong}"


# flows' layers, in pipeline order: a module may import its own layer and the ones before it.
FLOWS_LAYERS = [
    ("flows.resources", "flows.storage_secrets", "flows.errors", "flows.locks", "flows.stopwatch"),
    ("flows.ingest",),
    ("flows.warehouse",),
    ("flows.verdict",),
    ("flows.publish",),
    ("flows.nightly", "flows.night_settings", "flows.night_summary", "flows.prefect_server"),
    ("flows.commands",),
    ("flows.cli",),
]


def _layer(name: str) -> int | None:
    for i, prefixes in enumerate(FLOWS_LAYERS):
        if any(name == p or name.startswith(p + ".") for p in prefixes):
            return i
    return None


@pytest.mark.parametrize("path", _modules("flows"), ids=lambda p: str(p.relative_to(ROOT)))
def test_flows_imports_run_in_pipeline_order(path):
    name = _name(path)
    if name == "flows":
        return
    own = _layer(name)
    assert own is not None, f"{name} is in none of flows' layers (tests/test_layout.py FLOWS_LAYERS)"
    later = sorted(i for i in _imports(path) if i.startswith("flows.") and (_layer(i) or 0) > own)
    assert not later, f"{name} (layer {own}) imports later layers: {later}"


def _module_graph() -> dict[str, set[str]]:
    """module -> the modules of flows and transforms it imports (deferred imports included)."""
    paths = {_name(p): p for pkg in ("flows", "transforms") for p in _modules(pkg)}
    graph = {}
    for name, path in paths.items():
        targets = set()
        for i in _imports(path):
            # ``from flows.verdict import items`` names the module flows.verdict.items
            while i and i not in paths:
                i = i.rpartition(".")[0]
            if i and i != name and not name.startswith(i + ".") and i not in ("flows", "transforms"):
                targets.add(i)
        graph[name] = targets
    return graph


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """One cycle per strongly connected component of more than one module (Tarjan)."""
    index, low, stack, on_stack, found = {}, {}, [], set(), []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_no_module_imports_another_in_a_cycle():
    assert _cycles(_module_graph()) == []


def test_the_cycle_guard_sees_a_cycle():
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


PACKAGES = sorted(str(p.parent.relative_to(ROOT)) for top in ("transforms", "flows")
                  for p in (ROOT / top).rglob("__init__.py"))


def _package_doc(package: str) -> str:
    return ast.get_docstring(ast.parse((ROOT / package / "__init__.py").read_text(encoding="utf-8"))) or ""


@pytest.mark.parametrize("package", PACKAGES)
def test_every_package_says_what_it_holds_and_may_import(package):
    doc = _package_doc(package)
    assert doc and "import" in doc and len(doc.splitlines()) >= 3


def _members(package: str) -> list[str]:
    """The modules and subpackages directly in a package."""
    return sorted(p.stem if p.suffix == ".py" else p.name for p in (ROOT / package).iterdir()
                  if (p.suffix == ".py" and p.stem != "__init__") or (p / "__init__.py").is_file())


def _unlisted(doc: str, members: list[str]) -> list[str]:
    """The members a package docstring does not name as a literal (``name``, ``package.name``)."""
    named = set(re.findall(r"``(?:[\w.]+\.)?(\w+)``", doc))
    return [m for m in members if m not in named]


@pytest.mark.parametrize("package", PACKAGES)
def test_every_module_is_in_its_package_docstring(package):
    """The docstring is the package's map: a module it does not name is one a reader never finds."""
    assert _unlisted(_package_doc(package), _members(package)) == [], \
        f"{package}/__init__.py: name these modules in its docstring"


def test_the_map_guard_sees_a_missing_module():
    doc = "Parsers: ``xla_hlo`` and ``transforms.parsers.formats``; the torch_trace log (prose)."
    assert _unlisted(doc, ["formats", "torch_trace", "xla_hlo"]) == ["torch_trace"]


def test_every_dump_kind_has_a_row_in_the_readme_formats_table():
    from transforms.records import DumpKind

    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    table = readme.split("## Formats", 1)[1].split("\n## ", 1)[0]
    rows = set(re.findall(r"^\| `(\w+)` \|", table, re.MULTILINE))
    assert sorted(k.value for k in DumpKind if k.value not in rows) == []


# What the commands share: each command module imports these of flows.commands, never another command.
COMMANDS_SHARED = ("flows.commands.preflight", "flows.commands.signals", "flows.commands.night", "flows.commands.shared")


@pytest.mark.parametrize("path", _modules("flows/commands"), ids=lambda p: p.stem)
def test_commands_import_no_other_commands_helpers(path):
    name = _name(path)
    others = sorted(i for i in _imports(path) if i.startswith("flows.commands.") and not i.startswith(name)
                    and not any(i == s or i.startswith(s + ".") for s in COMMANDS_SHARED))
    assert others == [], f"{name} imports {others}: move what they share to {COMMANDS_SHARED}"


def test_cli_only_parses_arguments_and_calls_flows():
    imports = _imports(ROOT / "flows" / "cli.py")
    outside = sorted(i for i in imports if i.split(".")[0] in {"duckdb", "polars", "transforms", "prefect", "rich"})
    assert not outside, f"flows/cli.py reaches past the flows: {outside}"
    assert "execute(" not in (ROOT / "flows" / "cli.py").read_text(encoding="utf-8")


def test_cli_maps_errors_to_exit_statuses_once():
    """cli.py catches ``CommandError`` in one place (``command``), besides turning parse's unknown
    --table into a usage error and main's SIGTERM status: no error class mapped by hand."""
    caught = []
    for node in ast.walk(ast.parse((ROOT / "flows" / "cli.py").read_text(encoding="utf-8"))):
        if isinstance(node, ast.ExceptHandler):
            types = node.type.elts if isinstance(node.type, ast.Tuple) else [node.type]
            caught += [ast.unparse(t) for t in types]
    assert sorted(caught) == ["BaseException", "CommandError", "ValueError"]


def test_each_error_a_person_can_act_on_is_a_command_error_with_its_exit_status():
    from flows.commands.accept import AcceptRefused
    from flows.commands.check import BadDirectory, CheckError
    from flows.commands.diff import DiffFailed, DiffRefused
    from flows.commands.incidents import IncidentsError, NoSuchIncident
    from flows.commands.query import QueryError
    from flows.errors import CommandError
    from flows.ingest.bucket_access import BucketAccessDenied, BucketNotFound, BucketUnusable
    from flows.publish.notify import BadTarget
    from flows.verdict.incident_reader import OlderWarehouse
    from flows.warehouse.reads import NoSuchRun
    from flows.warehouse.store import WarehouseBusy

    statuses = {cls.__name__: cls.exit_code for cls in (
        BucketUnusable, BucketNotFound, BucketAccessDenied, WarehouseBusy, BadTarget, AcceptRefused, NoSuchRun,
        DiffRefused, DiffFailed, BadDirectory, CheckError, QueryError, IncidentsError, NoSuchIncident, OlderWarehouse)
        if issubclass(cls, CommandError)}
    assert statuses == {"BucketUnusable": 2, "BucketNotFound": 2, "BucketAccessDenied": 2, "WarehouseBusy": 3,
                        "BadTarget": 2, "AcceptRefused": 2, "NoSuchRun": 2, "DiffRefused": 2, "DiffFailed": 1,
                        "BadDirectory": 2, "CheckError": 1, "QueryError": 1, "IncidentsError": 1, "NoSuchIncident": 2,
                        "OlderWarehouse": 1}
    assert CommandError("x", exit_code=4).exit_code == 4 and NoSuchRun("r", []).exit_code == 2
    assert str(NoSuchRun("r", [])) == "no run 'r' in the warehouse; latest runs: none yet"


def test_the_guard_sees_a_wrong_import(tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text("def f():\n    from transforms.parsers import xla_hlo\n")
    assert "transforms.parsers" in _imports(bad)


@pytest.mark.integration
def test_spawn_workers_import_neither_prefect_nor_duckdb():
    """A parse worker (``flows.ingest.pool``, spawned) and an items batch worker import these
    modules alone: Prefect or DuckDB there would cost each worker ~60 MiB and seconds to start."""
    import subprocess
    import sys

    probe = ("import flows.ingest.pool, flows.ingest.staging, flows.verdict.items; import sys; "
             "print(sorted({m.split('.')[0] for m in sys.modules} & {'prefect', 'duckdb'}))")
    done = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


# Where SQL may live: the warehouse and the verdict, the site's reads and the notifications'
# ledger, and the memory split (one SET). Every other module of ``flows`` only calls them.
SQL_HOMES = ("flows/warehouse", "flows/verdict", "flows/publish/site.py", "flows/publish/notify.py",
             "flows/resources.py")
SQL_CALLS = {"execute", "executemany", "sql", "register", "query"}
# A statement's first word (a word: "updated" is a key of a listing, not SQL).
SQL_START = re.compile(r"\s*\(?\s*(SELECT|INSERT|UPDATE|DELETE|CREATE|WITH|COPY|ATTACH|DROP|ALTER)\b", re.IGNORECASE)


def _sql_in(source: str) -> list[str]:
    """Where ``source`` runs or holds SQL: calls of ``.execute``/``.sql``/``.register`` (and
    ``executemany``, ``query``), and string constants that start like a statement (an f-string by
    its first part; docstrings, which are prose, aside)."""
    tree = ast.parse(source)
    docstrings = {id(node.body[0].value) for node in ast.walk(tree)
                  if isinstance(node, (ast.Module, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
                  and node.body and isinstance(node.body[0], ast.Expr) and isinstance(node.body[0].value, ast.Constant)}
    inner = {id(v) for node in ast.walk(tree) if isinstance(node, ast.JoinedStr) for v in node.values}
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in SQL_CALLS:
            found.append(f"line {node.lineno}: .{node.func.attr}(")
        text = None
        if isinstance(node, ast.JoinedStr) and node.values and isinstance(node.values[0], ast.Constant):
            text = node.values[0].value
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings | inner:
            text = node.value
        if isinstance(text, str) and SQL_START.match(text):
            found.append(f"line {node.lineno}: {text.strip()[:40]!r}")
    return sorted(found, key=lambda f: int(f.split(":")[0].removeprefix("line ")))


def _sql_free_modules() -> list[Path]:
    """Every module of ``flows`` outside ``SQL_HOMES`` (``transforms`` imports no DuckDB at all)."""
    return [p for p in _modules("flows")
            if not any(str(p.relative_to(ROOT)) == home or p.is_relative_to(ROOT / home) for home in SQL_HOMES)]


@pytest.mark.parametrize("path", _sql_free_modules(), ids=lambda p: str(p.relative_to(ROOT)))
def test_sql_stays_in_the_warehouse_and_verdict_layers(path):
    """The nightly's tasks and the commands call into flows/warehouse and flows/verdict; ingest
    never touches the warehouse; the CLI only parses arguments."""
    assert _sql_in(path.read_text(encoding="utf-8")) == [], f"{path.relative_to(ROOT)}: move its SQL to {SQL_HOMES}"


def test_every_sql_home_exists():
    assert [home for home in SQL_HOMES if not (ROOT / home).exists()] == []


def test_the_sql_guard_sees_sql():
    source = ('"""Select the runs."""\n'
              'def f(con, day):\n'
              '    """With a docstring."""\n'
              '    rows = con.execute(q)\n'
              '    return f"  with x AS (SELECT {day})", "delete FROM t", "selected", "Copy"\n'
              'def g(con, t):\n'
              '    con.register("_t", t)\n'
              '    return con.sql("(select 1)"), "drop table x", "updated"\n')
    assert _sql_in(source) == ["line 4: .execute(", "line 5: 'with x AS (SELECT'", "line 5: 'delete FROM t'",
                               "line 5: 'Copy'", "line 7: .register(", "line 8: .sql(", "line 8: 'drop table x'",
                               "line 8: '(select 1)'"]


def test_the_tests_readme_names_every_tier_and_what_puts_a_test_in_it():
    """tests/README.md is where a first test's author learns the tiers: it names each tier, each
    fixture that sets one, and the lists conftest keeps (a new one there, and the page says it)."""
    from tests.conftest import TIER_BY_FIXTURE, TIERS

    page = (ROOT / "tests" / "README.md").read_text(encoding="utf-8")
    named = set(re.findall(r"`(\w+)`", page))
    wanted = {*TIERS, *TIER_BY_FIXTURE, "SLOW_MODULES", "SHARED_FIXTURE_MODULES", "SHARED_BY_BUCKET",
              "_fast_tier_guard", "_schedule", "pytest_xdist_make_scheduler", "_shared_prefect_server"}
    assert sorted(wanted - named) == []
