"""A smoke subset of the Rust conformance corpus (tests/conformance) run
through the Python binding's published functions, with the same expected
outputs."""
import json
import pathlib

import pytest

import car_runtime as car

ROOT = pathlib.Path(__file__).resolve().parents[3] / "tests" / "conformance"

# method -> (binding function, positional parameter names)
METHODS = {
    "verify": (car.verify, ["proposal", "initial_state", "tool_names", "max_actions", "tool_schemas"]),
    "simulate": (car.simulate, ["proposal", "initial_state"]),
    "optimize": (car.optimize, ["proposal"]),
    "equivalent": (car.equivalent, ["p1", "p2", "test_states"]),
    "transaction_check": (car.transaction_check, ["proposal", "versions", "state"]),
    "permission_classify": (car.permission_classify, ["proposal"]),
    "match_shell_command": (car.match_shell_command, ["command", "rules"]),
    "evaluate_permission": (car.evaluate_permission, ["chain", "tool", "input"]),
    "toolset_hash": (car.toolset_hash, ["tools"]),
    "compile_permission_preset": (car.compile_permission_preset, ["name"]),
    "normalize_proposal": (car.normalize_proposal, ["proposal"]),
}


def subset(want, got):
    if isinstance(want, dict):
        return isinstance(got, dict) and all(k in got and subset(v, got[k]) for k, v in want.items())
    if isinstance(want, list):
        return isinstance(got, list) and len(want) == len(got) and all(subset(w, g) for w, g in zip(want, got))
    if isinstance(want, (int, float)) and not isinstance(want, bool) and isinstance(got, (int, float)):
        return float(want) == float(got)
    return want == got


def cases():
    for path in sorted(ROOT.rglob("*.json")):
        for case in json.loads(path.read_text())["cases"]:
            # The admission corpus has no `method`: test_admission_conformance.py runs it.
            if case.get("method") in METHODS:
                yield pytest.param(case, id=f"{path.parent.name}/{path.stem}:{case['name'][:60]}")


@pytest.mark.parametrize("case", list(cases()))
def test_case(case):
    fn, names = METHODS[case["method"]]
    params = case.get("params") or {}
    if any(k not in names for k in params):
        pytest.skip("uses a facade-only parameter")
    if params.get(names[0]) is None:
        pytest.skip("tests the facade's missing-argument error; the binding's first argument is required")
    # The facade defaults a missing dry-run input to {}; the binding's argument is positional.
    args = [params.get(n, {} if n == "input" else None) for n in names]
    while args and args[-1] is None:
        args.pop()
    if "expected_error" in case:
        with pytest.raises(car.CarError) as e:
            fn(*args)
        assert e.value.code == case["expected_error"]
        return
    out = fn(*args)
    if isinstance(out, str):
        try:
            out = json.loads(out)
        except ValueError:
            pass
    if "expected" in case:
        assert subset(case["expected"], out) and subset(out, case["expected"]), out
    else:
        assert subset(case["expected_subset"], out), out


def test_the_smoke_subset_is_substantial():
    assert len(list(cases())) >= 100
