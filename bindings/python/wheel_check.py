"""Uses an installed car_runtime as a user would: the JSON-text API, a
coroutine tool under execute_proposal_obj_async, a pickled error and the
stubs beside the module. Run by wheel-test.sh (the x86_64 wheel in a fresh
virtualenv) and by scripts/try-foreign-packages.sh (a wheel for another
architecture, under qemu-user). Prints one line; exits non-zero on a failure."""
import asyncio
import json
import pathlib
import pickle
import platform

import car_runtime

assert car_runtime.protocol_version() == 3
rt = car_runtime.CarRuntime()
rt.register_tool("t")
out = json.loads(rt.execute_proposal({"actions": [{"id": "a", "type": "tool_call", "tool": "t"}]}, lambda c: {"ok": 1}))
assert out["results"][0]["output"] == {"ok": 1}, out


async def tool(call_json: str) -> dict:
    await asyncio.sleep(0)
    return {"async": True}


async def main() -> dict:
    return await rt.execute_proposal_obj_async({"actions": [{"id": "a", "type": "tool_call", "tool": "t"}]}, tool)


assert asyncio.run(main())["results"][0]["output"] == {"async": True}
try:
    car_runtime.normalize_proposal("{")
    raise AssertionError("normalize_proposal accepted '{'")
except car_runtime.CarInputError as e:
    back = pickle.loads(pickle.dumps(e))
    assert type(back) is car_runtime.CarInputError and back.code == e.code and isinstance(back.details, dict)
report = json.loads(car_runtime.verify(json.dumps({"actions": [{"id": "w", "type": "state_write", "parameters": {"key": "k", "value": 1}}]})))
assert report["valid"] is True, report
assert (pathlib.Path(car_runtime.__file__).parent / "__init__.pyi").exists()
print(f"wheel on {platform.machine()}: imports from another directory, runs a sync and an async tool, verifies, pickles its errors")
