"""The .pyi stubs name exactly what the module exports."""
import ast
import pathlib

import car_runtime


def test_stubs_match_the_module():
    stub = pathlib.Path(car_runtime.__file__).with_suffix(".pyi")
    tree = ast.parse(stub.read_text())
    names = {n.name for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))}
    # Re-exports (`from ._types import X as X`) are public names too.
    names |= {a.asname for n in tree.body if isinstance(n, ast.ImportFrom) for a in n.names if a.asname == a.name}
    exported = {n for n in car_runtime.__all__ if n != "__version__"}
    assert names == exported, (names ^ exported)
    methods = {n.name for c in tree.body if isinstance(c, ast.ClassDef) and c.name == "CarRuntime"
               for n in c.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n.name != "__init__"}
    actual = {m for m in dir(car_runtime.CarRuntime) if not m.startswith("_")}
    assert methods == actual, (methods ^ actual)
