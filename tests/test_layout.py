"""The source tree's shape (docs/architecture.md): one concept per file, so no source file is over 400 lines (the
exceptions, the jail's runtime and the independent recompute of a result, say at their top why each is one file), and
no import circle between the project's modules, counting imports made inside functions too."""

from __future__ import annotations

import ast
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MAX_LINES = 400
# Bound into the jail as one standard-library-only file; the result's check that imports nothing of the project (see
# the first lines of each).
ONE_FILE = {"services/sandbox/jail_runtime.py", "coordinator/experiment/recompute.py"}
SOURCE_SUFFIXES = (".py", ".js")


def tracked(*patterns: str) -> list[str]:
    out = subprocess.run(["git", "ls-files", "--", *patterns], cwd=ROOT, capture_output=True, text=True, check=True)
    return [f for f in out.stdout.splitlines() if (ROOT / f).is_file()]


def module_graph(files: list[str], root: Path = ROOT) -> dict[str, set[str]]:
    """Module name -> the project modules it imports (at any depth of its code)."""
    modules = {}
    for f in files:
        parts = list(Path(f).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        if parts:
            modules[".".join(parts)] = f

    def resolve(name: str) -> str | None:
        while name and name not in modules:
            name = name.rpartition(".")[0]
        return name or None

    graph: dict[str, set[str]] = {m: set() for m in modules}
    for name, f in modules.items():
        package = name if f.endswith("__init__.py") else name.rpartition(".")[0]
        for node in ast.walk(ast.parse((root / f).read_text(), f)):
            targets: list[str | None] = []
            if isinstance(node, ast.Import):
                targets = [resolve(a.name) for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    up = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                    base = ".".join(up + ([base] if base else []))
                for a in node.names:
                    full = f"{base}.{a.name}" if base else a.name
                    targets.append(full if full in modules else resolve(base))
            graph[name] |= {t for t in targets if t and t != name}
    return graph


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    m = stack.pop()
                    on_stack.discard(m)
                    component.append(m)
                    if m == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def test_no_source_file_is_over_400_lines():
    long = {f: n for f in tracked(*(f"*{s}" for s in SOURCE_SUFFIXES))
            if f not in ONE_FILE and (n := len((ROOT / f).read_text().splitlines())) > MAX_LINES}
    assert not long, f"split these along their concepts (docs/architecture.md): {long}"
    for f in ONE_FILE:
        assert "one file" in (ROOT / f).read_text()[:1500].lower(), f"{f} must say at its top why it is one file"


def test_no_import_circle():
    assert not circles(module_graph(tracked("*.py"))), "modules that import each other, directly or not"


def test_one_owner_per_schema():
    """The league serves what the coordinator records through its API (docs/CONVENTIONS.md): no file of the league
    names the coordinator's tables (`coord_runs`, `coord_phases`, ...), and no service imports the coordinator."""
    named = [f for f in tracked("services/league/*") if "coord_" in (ROOT / f).read_bytes().decode("utf-8", "ignore")]
    assert not named, f"these league files name the coordinator's tables; ask its API instead: {named}"
    graph = module_graph(tracked("*.py"))
    imports = {m: sorted(t for t in targets if t.split(".")[0] == "coordinator") for m, targets in graph.items()
               if m.startswith("services.")}
    assert not {m: t for m, t in imports.items() if t}, "services import the coordinator"


# The coordinator's rooms, bottom to top (docs/architecture.md, "Layers"): a module imports only modules of its own
# room or of rooms below it. The run does not know it is recorded, the recording does not know the experiment.
ROOMS = (
    ("coordinator.clients",),  # the services as the coordinator holds them (in process or over gRPC)
    ("coordinator.run",),  # the step, its phases, the journal, the queue and workers
    ("coordinator.record",),  # per-step metrics, timeline, efficiency, the report and its figures
    ("coordinator.train",),  # `populora train`: a run with its recording
    ("coordinator.experiment",),  # arms, seeds, scoring, the comparison
    ("coordinator", "coordinator.cli", "coordinator.distributed"),  # the command line
)
FLOORS = ("populora", "services", "coordinator")  # the core, the services, the coordinator: imports only go down


def room_of(module: str) -> int | None:
    best = None
    for rank, prefixes in enumerate(ROOMS):
        for prefix in prefixes:
            if (module == prefix or module.startswith(prefix + ".")) and (best is None or len(prefix) > best[1]):
                best = (rank, len(prefix))
    return None if best is None else best[0]


def upward_imports(graph: dict[str, set[str]]) -> list[str]:
    """Every import that points up: a floor importing a higher floor, or a coordinator room a higher room."""
    found = []
    for module, targets in sorted(graph.items()):
        top = module.split(".")[0]
        for target in sorted(targets):
            other = target.split(".")[0]
            if top in FLOORS and other in FLOORS and FLOORS.index(other) > FLOORS.index(top):
                found.append(f"{module} -> {target} (floor {top} imports {other})")
            elif top == other == "coordinator":
                mine, theirs = room_of(module), room_of(target)
                if mine is not None and theirs is not None and theirs > mine:
                    found.append(f"{module} -> {target} (room {ROOMS[mine][0]} imports {ROOMS[theirs][0]})")
    return found


def test_imports_point_down():
    graph = module_graph(tracked("*.py"))
    unplaced = sorted(m for m in graph if m.split(".")[0] == "coordinator" and room_of(m) is None)
    assert not unplaced, f"give these coordinator modules a room in ROOMS (tests/test_layout.py): {unplaced}"
    up = upward_imports(graph)
    assert not up, "imports that point up (move the shared piece down instead):\n" + "\n".join(up)


def test_step_calls_only_phases():
    """coordinator/run/step.py reads as the algorithm: every phase it calls lives in coordinator/run/phases/, and it
    imports nothing else of the coordinator but the journal."""
    graph = module_graph(tracked("*.py"))
    other = sorted(t for t in graph["coordinator.run.step"] if t.startswith("coordinator.")
                   and not t.startswith("coordinator.run.phases") and t != "coordinator.run.journal")
    assert not other, f"step.py calls phases that live outside coordinator/run/phases/: {other}"


def test_the_direction_check_sees_an_upward_import(tmp_path):
    """The direction check is not vacuous: a run module importing the experiment, and the core importing a
    service, are both found; the same modules importing downward are not."""
    for d in ("coordinator/run", "coordinator/experiment", "populora", "services"):
        (tmp_path / d).mkdir(parents=True, exist_ok=True)
        (tmp_path / d / "__init__.py").write_text("")
    (tmp_path / "coordinator" / "__init__.py").write_text("")
    (tmp_path / "coordinator/run/step.py").write_text("def f():\n    from coordinator.experiment.x import g\n")
    (tmp_path / "coordinator/experiment/x.py").write_text("from coordinator.run import step\ng = 1\n")
    (tmp_path / "populora/core.py").write_text("import services.svc\n")
    (tmp_path / "services/svc.py").write_text("import populora.core\n")
    files = ["coordinator/__init__.py", "coordinator/run/__init__.py", "coordinator/run/step.py",
             "coordinator/experiment/__init__.py", "coordinator/experiment/x.py", "populora/__init__.py",
             "populora/core.py", "services/__init__.py", "services/svc.py"]
    up = upward_imports(module_graph(files, tmp_path))
    assert up == ["coordinator.run.step -> coordinator.experiment.x (room coordinator.run imports "
                  "coordinator.experiment)", "populora.core -> services.svc (floor populora imports services)"]
    (tmp_path / "coordinator/run/step.py").write_text("g = 2\n")
    (tmp_path / "populora/core.py").write_text("import json\n")
    assert upward_imports(module_graph(files, tmp_path)) == []


def documented_modules(text: str) -> dict[str, set[str]]:
    """docs/architecture.md's "Modules" section: package folder -> the module files listed under it."""
    listed: dict[str, set[str]] = {}
    folder = None
    for line in text.split("## Modules", 1)[-1].splitlines():
        if line.startswith("`") and line.rstrip().endswith("/`"):
            folder = line.strip().strip("`").rstrip("/")
            listed[folder] = set()
        elif folder and line.startswith("- `") and "`:" in line:
            listed[folder].add(line[3:line.index("`:")])
    return listed


def test_every_module_has_its_sentence_in_the_architecture_map():
    listed = documented_modules((ROOT / "docs" / "architecture.md").read_text())
    missing = [f for f in tracked("populora/*.py", "services/*.py", "coordinator/*.py", "bench/*.py")
               if not f.endswith("__init__.py") and not f.startswith(("populora/pb/", "services/league/migrations/"))
               and Path(f).name not in listed.get(str(Path(f).parent), set())]
    assert not missing, f"add a sentence for each to the Modules section of docs/architecture.md: {missing}"


def test_the_checks_see_a_circle_made_inside_a_function(tmp_path):
    """The circle check is not vacuous: a planted circle (one side importing inside a function, one by a relative
    import) is found, and the same modules without it are not."""
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "__init__.py").write_text("")
    (tmp_path / "pkg" / "a.py").write_text("def f():\n    from pkg.b import g\n    return g\n")
    (tmp_path / "pkg" / "b.py").write_text("from . import c\n\ndef g():\n    return c\n")
    (tmp_path / "pkg" / "c.py").write_text("import pkg.a\n")
    files = ["pkg/__init__.py", "pkg/a.py", "pkg/b.py", "pkg/c.py"]
    assert circles(module_graph(files, tmp_path)) == [["pkg.a", "pkg.b", "pkg.c"]]
    (tmp_path / "pkg" / "c.py").write_text("import json\n")
    assert circles(module_graph(files, tmp_path)) == []
