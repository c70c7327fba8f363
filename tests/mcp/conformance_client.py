"""A client for the conformance suite's client scenarios: our tool-source
client (the admission document's `mcp` section, through the Python binding)
connects to the URL the suite gives as the last argument, imports the
server's tools and calls `add_numbers` when offered (scenario `tools_call`)."""
import json
import sys

import car_runtime as car

url = sys.argv[-1]
rt = car.CarRuntime()
rt.set_permissions({"preset": "open", "mcp": {"servers": {"conformance": {"url": url}}}})
tools = [t["name"] for t in json.loads(rt.list_tools())]
print("imported:", tools, file=sys.stderr)
if "add_numbers" in tools:
    action = {"id": "a", "type": "tool_call", "tool": "add_numbers", "parameters": {"a": 1, "b": 2}}
    out = json.loads(rt.execute_proposal({"id": "p", "actions": [action]}, lambda c: {}))
    print(json.dumps(out["results"][0]), file=sys.stderr)
