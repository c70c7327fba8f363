import uniffi.car_runtime_uniffi.*

fun check(cond: Boolean, what: String) {
    if (!cond) throw AssertionError(what)
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
    println("uniffi kotlin: ok")
}
