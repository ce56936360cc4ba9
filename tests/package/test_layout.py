"""The code's shape, checked: no import circle inside tfrl/, no module past ~450 lines, no flag defined by importing
the library, and `import tfrl` light (no TensorFlow, no Keras)."""

import ast
import collections
import os
import pathlib
import subprocess
import sys

from tfrl import agents

REPO_ROOT = pathlib.Path(__file__).resolve().parents[2]
PACKAGE = REPO_ROOT / "tfrl"
MAX_LINES = 450


def _modules() -> dict[str, pathlib.Path]:
    modules = {}
    for path in PACKAGE.rglob("*.py"):
        name = ".".join(path.relative_to(REPO_ROOT).with_suffix("").parts)
        modules[name.removesuffix(".__init__")] = path
    return modules


def _imports(path: pathlib.Path, modules) -> set[str]:
    """The tfrl modules `path` imports, at its top or inside functions, and through tfrl.lazy_import.LazyModule."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        names = []
        if isinstance(node, ast.ImportFrom) and node.level == 0 and (node.module or "").startswith("tfrl"):
            names = [f"{node.module}.{alias.name}" if f"{node.module}.{alias.name}" in modules else node.module
                     for alias in node.names]
        elif isinstance(node, ast.Import):
            names = [alias.name for alias in node.names if alias.name.startswith("tfrl")]
        elif (isinstance(node, ast.Call) and getattr(node.func, "id", None) == "LazyModule" and node.args
              and isinstance(node.args[0], ast.Constant) and str(node.args[0].value).startswith("tfrl")):
            names = [node.args[0].value]
        found.update(name for name in names if name in modules)
    return found


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index, low, stack, on_stack, components, counter = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on_stack.add(v)
        for w in graph[v]:
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
                components.append(sorted(component))

    for v in list(graph):
        if v not in index:
            visit(v)
    return components


def test_the_import_graph_of_tfrl_has_no_circle():
    modules = _modules()
    graph = collections.defaultdict(set)
    for name, path in modules.items():
        # A package imports its own modules to re-export them; that is no circle of design.
        graph[name] = {m for m in _imports(path, modules) if m != name and not m.startswith(name + ".")}
    assert _cycles(graph) == []


def test_a_cycle_is_found_when_there_is_one():
    assert _cycles(collections.defaultdict(set, {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}})) == [["a", "b", "c"]]


def test_no_module_is_longer_than_the_limit():
    long = {str(path.relative_to(REPO_ROOT)): n for path in PACKAGE.rglob("*.py")
            if (n := len(path.read_text().splitlines())) > MAX_LINES}
    assert long == {}


def test_importing_the_library_defines_no_flag_and_loads_no_tensorflow():
    # Flags that modules of tfrl define (absl's own, defined when absl.app or absl.logging loads, are not ours).
    code = ("from absl import flags; import tfrl, tfrl.api, tfrl.run.launch, tfrl.run.runs, tfrl.envs, tfrl.cli; "
            "print(sorted(flag.name for module, defined in flags.FLAGS.flags_by_module_dict().items() "
            "if 'tfrl' in module for flag in defined))")
    light = subprocess.run([sys.executable, "-c", "import sys, tfrl; print('tensorflow' in sys.modules, "
                            "'keras' in sys.modules)"], capture_output=True, text=True, cwd=REPO_ROOT,
                           env={k: v for k, v in os.environ.items() if k != "KERAS_BACKEND"}, check=True)
    assert light.stdout.split() == ["False", "False"]
    defined = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO_ROOT,
                             check=True)
    assert defined.stdout.strip() == "[]", defined.stdout


MAX_TOP_LEVEL_MODULES = 12
AGENT_NAMES = agents.AGENT_NAMES  # the registry's: a new agent's name is checked without an edit here


def test_tfrl_is_grouped_in_wings_with_few_modules_at_the_top():
    top = sorted(p.name for p in PACKAGE.glob("*.py") if p.name not in ("__init__.py", "__main__.py"))
    assert len(top) <= MAX_TOP_LEVEL_MODULES, top
    for wing in ("run", "envs", "hardware", "replay", "models", "agents", "commands"):
        assert ast.get_docstring(ast.parse((PACKAGE / wing / "__init__.py").read_text())), wing


def test_no_re_export_stub_outside_package_faces():
    stubs = [f"{path.relative_to(REPO_ROOT)}:{n}" for path in PACKAGE.rglob("*.py") if path.name != "__init__.py"
             for n, line in enumerate(path.read_text().splitlines(), 1) if "noqa: F401" in line]
    assert stubs == []


def test_only_the_commands_import_the_cli_layer_and_the_loader_no_server():
    modules = _modules()
    offenders = {name for name, path in modules.items()
                 if not name.startswith(("tfrl.commands", "tfrl.cli", "tfrl.__main__"))
                 and {m for m in _imports(path, modules) if m.startswith(("tfrl.cli", "tfrl.commands"))}}
    assert offenders == set()
    assert not {m for m in _imports(modules["tfrl.models.serving"], modules) if m.startswith("tfrl.model_server")}


def test_no_test_hook_ships_in_the_package():
    hooks = [str(p.relative_to(REPO_ROOT)) for p in PACKAGE.rglob("*.py") if "TFRL_TEST_" in p.read_text()]
    assert hooks == []


def test_no_agent_name_in_live_code_outside_the_agents():
    """Strings naming an agent belong to tfrl/agents/ (its registry and packages); docstrings and comments may."""
    found = []
    for path in PACKAGE.rglob("*.py"):
        if path.is_relative_to(PACKAGE / "agents"):
            continue
        tree = ast.parse(path.read_text())
        docstrings = {id(node.body[0].value) for node in ast.walk(tree)
                      if isinstance(node, (ast.Module, ast.FunctionDef, ast.ClassDef, ast.AsyncFunctionDef))
                      and node.body and isinstance(node.body[0], ast.Expr)
                      and isinstance(node.body[0].value, ast.Constant)}
        found += [f"{path.relative_to(REPO_ROOT)}:{node.lineno}" for node in ast.walk(tree)
                  if isinstance(node, ast.Constant) and node.value in AGENT_NAMES and id(node) not in docstrings]
    assert found == []


def test_the_benchmarks_import_each_other_without_a_circle():
    scripts = {p.stem: p for p in (REPO_ROOT / "benchmarks").glob("*.py")}
    graph = collections.defaultdict(set)
    for name, path in scripts.items():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                graph[name] |= {alias.name for alias in node.names if alias.name in scripts}
            elif isinstance(node, ast.ImportFrom) and node.module in scripts:
                graph[name].add(node.module)
    assert _cycles(graph) == []
    assert graph["summary"] and graph["profiles"]  # the walk saw their imports
