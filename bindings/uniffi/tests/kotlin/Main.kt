import uniffi.car_runtime_uniffi.*

fun check(cond: Boolean, what: String) {
    if (!cond) throw AssertionError(what)
}

class Tools(val rt: CarRuntime) : ToolHandler {
    val calls = mutableListOf<String>()
    override fun call(callJson: String): String {
        calls.add(callJson)
        return when {
            callJson.contains("\"tool\":\"deploy\"") -> {
                rt.stateSet("seen", "\"kotlin\"", null) // re-entrant call into the runtime
                "{\"deployed\":true}"
            }
            callJson.contains("\"tool\":\"flaky\"") -> throw ToolException.Failed("flaky tool failed")
            else -> throw ToolException.Terminal("card charged twice")
        }
    }
}

fun main() {
    check(protocolVersion() == 3u, "protocol version")
    check(clientVersion().isNotEmpty(), "client version")
    val p = normalizeProposal("{\"actions\":[{\"type\":\"tool_call\",\"tool\":\"x\"}]}")
    check(p.contains("\"max_retries\":3"), "defaults filled: $p")
    try {
        normalizeProposal("{\"actions\":[{\"type\":\"tool_call\"}]}")
        throw AssertionError("expected CarException")
    } catch (e: CarException.Failed) {
        check(e.code == "missing_field", "code was ${e.code}")
    }
    val v = verify("{\"actions\":[{\"id\":\"a\",\"type\":\"tool_call\",\"tool\":\"x\"}]}", null, listOf("y"), null, null)
    check(v.contains("\"valid\":false"), "verify: $v")

    val rt = CarRuntime()
    rt.registerTool("deploy")
    rt.registerTool("flaky")
    rt.registerTool("fatal")
    val tools = Tools(rt)
    val out = rt.executeProposal(
        "{\"id\":\"p\",\"actions\":[{\"id\":\"d\",\"type\":\"tool_call\",\"tool\":\"deploy\"}," +
            "{\"id\":\"f\",\"type\":\"tool_call\",\"tool\":\"flaky\",\"failure_behavior\":\"skip\"}]}",
        tools, null, null)
    check(out.contains("\"output\":{\"deployed\":true}"), "kotlin tool output: $out")
    check(out.contains("flaky tool failed"), "a throwing tool fails its action: $out")
    check(rt.stateGet("seen", null) == "\"kotlin\"", "re-entrant state_set")
    check(tools.calls.size == 2, "two tool calls")

    rt.stateSet("k", "1", null)
    val out2 = rt.executeProposal(
        "{\"id\":\"p2\",\"actions\":[{\"id\":\"w\",\"type\":\"state_write\",\"parameters\":{\"key\":\"k\",\"value\":2}}," +
            "{\"id\":\"t\",\"type\":\"tool_call\",\"tool\":\"fatal\",\"state_dependencies\":[\"k\"]}]}",
        tools, null, null)
    check(out2.contains("\"terminal\":true"), "terminal failure: $out2")
    check(out2.contains("\"rolled_back\":true"), "rolled back: $out2")
    check(rt.stateGet("k", null) == "1", "state restored after the terminal abort")
    try {
        rt.permissionSetTier("root")
        throw AssertionError("expected CarException")
    } catch (e: CarException.Failed) {
        check(e.code.isNotEmpty(), "error code")
    }
    // permissionSetTier("read_only") is enforced in-process: `rm -rf /` is refused unrun.
    val tiered = CarRuntime()
    tiered.registerTool("shell")
    check(tiered.permissionSetTier("read_only") == "read_only", "tier set")
    val shellCalls = Tools(tiered)
    val refused = tiered.executeProposal(
        "{\"id\":\"t\",\"actions\":[{\"id\":\"a\",\"type\":\"tool_call\",\"tool\":\"shell\",\"parameters\":{\"command\":\"rm -rf /\"}}]}",
        shellCalls, null, null)
    check(refused.contains("\"status\":\"rejected\""), "read_only refuses rm -rf /: $refused")
    check(shellCalls.calls.isEmpty(), "the shell tool was never called")
    // The cost of a foreign ToolHandler round trip (a figure, not an assertion).
    class Noop : ToolHandler {
        override fun call(callJson: String): String = "{}"
    }
    rt.registerTool("noop")
    val n = 2000
    val actions = (0 until n).joinToString(",") { "{\"id\":\"n$it\",\"type\":\"tool_call\",\"tool\":\"noop\"}" }
    val big = "{\"id\":\"bench\",\"actions\":[$actions]}"
    rt.executeProposal(big, Noop(), null, null) // warm-up
    val t0 = System.nanoTime()
    val outBench = rt.executeProposal(big, Noop(), null, null)
    val perCall = (System.nanoTime() - t0) / 1000.0 / n
    check(outBench.contains("\"actions_executed\":$n"), "all $n callbacks ran")
    println("uniffi kotlin: ToolHandler round trip %.1f us per call (%d calls in one proposal)".format(perCall, n))
    // The README's example (bindings/uniffi/README.md, extracted by test.sh).
    val fromReadme = readmeExample()
    check(fromReadme.contains("\"status\":\"succeeded\""), "README example: $fromReadme")
    println("uniffi kotlin: ok")
}
