"""A typed program against car_runtime: checked by `mypy --strict` in
scripts/test and run there too (it must exit 0)."""

import asyncio
import json
from typing import Any, Dict, List

import car_runtime
from car_runtime import ActionProposal, ActionResult, CarError, ProposalResult, ToolCall


def deploy(call_json: str) -> Dict[str, Any]:
    call: ToolCall = json.loads(call_json)
    return {"deployed": call["params"].get("env", "dev"), "attempt": call["attempt"]}


async def fetch(call_json: str) -> Dict[str, Any]:
    await asyncio.sleep(0)
    return {"fetched": json.loads(call_json)["tool"]}


PROPOSAL: ActionProposal = {
    "actions": [
        {"id": "build", "type": "tool_call", "tool": "fetch"},
        {"id": "ship", "type": "tool_call", "tool": "deploy", "parameters": {"env": "staging"}},
    ]
}


def summary(result: ProposalResult) -> List[str]:
    lines: List[str] = []
    for r in result["results"]:
        action: ActionResult = r
        lines.append(f"{action['action_id']}: {action['status']}")
    return lines


async def main() -> int:
    rt = car_runtime.CarRuntime()
    rt.register_tool("fetch")
    rt.register_tool("deploy")

    def tool(call_json: str) -> Any:
        call: ToolCall = json.loads(call_json)
        return fetch(call_json) if call["tool"] == "fetch" else deploy(call_json)

    verdict = rt.verify_proposal_obj(PROPOSAL)
    assert verdict["valid"], verdict["issues"]
    result: ProposalResult = await rt.execute_proposal_obj_async(PROPOSAL, tool)
    assert summary(result) == ["build: succeeded", "ship: succeeded"], summary(result)
    text: str = await rt.execute_proposal_async(PROPOSAL, tool)
    assert json.loads(text)["results"][1]["output"]["deployed"] == "staging"
    try:
        car_runtime.verify("{not json")
    except CarError as e:
        details: Dict[str, Any] = e.details
        print(f"bad input rejected: {e.code} {sorted(details)}")
    print("\n".join(summary(result)))
    return 0


if __name__ == "__main__":
    raise SystemExit(asyncio.run(main()))
