"""The supervisor imports what workers run before it forks them (router.worker.process.preload):
a worker, and each restart of one, starts with every module it would import already loaded."""
import ast
import json
import subprocess
import sys
from pathlib import Path

import router.worker.process

_PROBE = """
import json, sys
import router.supervisor
before = set(sys.modules)
router.worker.process.preload()
print(json.dumps({"before": sorted(before), "after": sorted(sys.modules)}))
"""


def _imported_inside_functions(path: Path) -> set[str]:
    """The modules a file imports in its functions: what a worker imports as it starts."""
    names = set()
    for function in ast.walk(ast.parse(path.read_text())):
        if isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef)):
            for node in ast.walk(function):
                if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                    names.add(node.module)
                elif isinstance(node, ast.Import):
                    names.update(alias.name for alias in node.names)
    return {name for name in names if name.startswith("router.")}


def test_every_module_a_worker_imports_as_it_starts_is_loaded_before_the_fork():
    wanted = _imported_inside_functions(Path(router.worker.process.__file__))
    wanted.discard("router.worker.process")
    assert {"router.portals.endpoint", "router.portals.peer"} <= wanted     # the probe sees the lazy imports
    # A fresh interpreter: this test process may have imported them all already.
    out = subprocess.run([sys.executable, "-c", _PROBE], capture_output=True, text=True, timeout=120, check=True)
    modules = json.loads(out.stdout)
    # The portals' modules are not among the supervisor's own imports: preload() is what loads them.
    assert {"router.portals.endpoint", "router.portals.peer"}.isdisjoint(modules["before"])
    assert wanted <= set(modules["after"]), wanted - set(modules["after"])
