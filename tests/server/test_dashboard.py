"""Issue #19: the dashboard in a real headless Chromium (Selenium).

Sign in with the daemon token, see a pending approval appear without a
reload, open its diff, approve it and see the waiting proposal finish; a
request without the CSRF token or from another origin is refused; the event
log page shows the hash chain verified. With CAR_DASHBOARD_SHOTS=DIR set, a
PNG of each page is written there (scripts/dashboard-screenshots.sh).

Skipped when chromium / chromedriver or selenium are missing (scripts/test
installs them).
"""

import asyncio
import json
import os
import re
import shutil
import threading
import time
import urllib.error
import urllib.request

import pytest

from client import Client
from test_server import Daemon, proposal, tool_call

selenium = pytest.importorskip("selenium")
from selenium import webdriver  # noqa: E402
from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.support import expected_conditions as EC  # noqa: E402
from selenium.webdriver.support.ui import WebDriverWait  # noqa: E402

OP = "operator-token-dashboard-0123456789"
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
DRIVER = shutil.which("chromedriver")
SHOTS = os.environ.get("CAR_DASHBOARD_SHOTS")

pytestmark = pytest.mark.skipif(not (CHROMIUM and DRIVER), reason="chromium and chromedriver are not installed")


def dashboard_url(d):
    m = re.search(r"dashboard on (http://\S+/) ", d.text())
    assert m, d.text()
    return m.group(1).rstrip("/")


@pytest.fixture(scope="module")
def daemon():
    # A port of its own (`--dashboard 0`): the default, the WebSocket port
    # + 1 of a daemon on an ephemeral port, may be another socket's.
    d = Daemon("--dashboard", "0", env={"CAR_AUTH_TOKEN": OP})
    try:
        d.dash = dashboard_url(d)
        yield d
    finally:
        d.__exit__(None, None, None)
        shutil.rmtree(d.home, ignore_errors=True)


@pytest.fixture(scope="module")
def browser():
    opts = webdriver.ChromeOptions()
    opts.binary_location = CHROMIUM
    for a in ["--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--window-size=1280,900"]:
        opts.add_argument(a)
    b = webdriver.Chrome(service=webdriver.ChromeService(executable_path=DRIVER), options=opts)
    try:
        yield b
    finally:
        b.quit()


def shot(b, name):
    if SHOTS:
        os.makedirs(SHOTS, exist_ok=True)
        b.save_screenshot(os.path.join(SHOTS, f"dashboard-{name}.png"))


class Submitter:
    """A WebSocket session on its own thread that submits proposals and
    records when its tool is dispatched."""

    def __init__(self, url, admission):
        self.url, self.admission = url, admission
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        self.ran = []
        self.c = self.run(self._connect())

    def run(self, coro, timeout=30):
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    async def _connect(self):
        c = await Client.connect(self.url)
        await c.call("session.auth", {"token": OP})
        init = await c.call("session.init", {"client_id": "dashboard-test", "admission": self.admission})
        self.session_id = init["session_id"]
        await c.call("events.chain.enable")
        await c.call("tools.register", [{"name": "edit_file"}, {"name": "shell"}])

        async def execute(params):
            self.ran.append(params["parameters"])
            return "ok"

        c.handlers["tools.execute"] = execute
        return c

    def submit(self, p):
        return asyncio.run_coroutine_threadsafe(self.c.request("proposal.submit", {"proposal": p}, timeout=60), self.loop)

    def close(self):
        self.run(self.c.close())
        self.loop.call_soon_threadsafe(self.loop.stop)


def sign_in(b, daemon):
    b.get(daemon.dash + "/login")
    b.delete_all_cookies()
    b.get(daemon.dash + "/")
    WebDriverWait(b, 20).until(EC.presence_of_element_located((By.ID, "token")))
    assert b.current_url.endswith("/login"), b.current_url
    shot(b, "sign-in")
    b.find_element(By.ID, "token").send_keys(OP)
    b.find_element(By.ID, "sign-in").click()
    WebDriverWait(b, 20).until(EC.presence_of_element_located((By.ID, "pending")))
    WebDriverWait(b, 20).until(EC.text_to_be_present_in_element((By.ID, "live"), "live"))


def test_sign_in_approve_with_the_diff_and_the_proposal_finishes(daemon, browser):
    b = browser
    # A wrong token is refused and stays on the sign-in page.
    b.get(daemon.dash + "/login")
    b.find_element(By.ID, "token").send_keys("not-the-token")
    b.find_element(By.ID, "sign-in").click()
    WebDriverWait(b, 20).until(EC.text_to_be_present_in_element((By.ID, "message"), "not this daemon's"))
    sign_in(b, daemon)
    cookies = {c["name"]: c for c in b.get_cookies()}
    assert cookies["car_dashboard"]["httpOnly"] is True and cookies["car_dashboard"]["sameSite"] == "Strict"

    s = Submitter(daemon.url.rstrip("/"), {"ask": [{"tool": "edit_file"}, {"tool": "shell"}]})
    try:
        # Attacker text in the proposal: shown as text, never run.
        evil = "<img src=x onerror=\"document.title='pwned'\">"
        edit = tool_call("e1", "edit_file", parameters={
            "path": "src/app.py", "old_text": "debug = True\n", "new_text": "debug = False\n" + evil + "\n"})
        fut = s.submit(proposal([edit], "dash-1"))
        # Appears without a reload.
        row = WebDriverWait(b, 20).until(
            EC.presence_of_element_located((By.CSS_SELECTOR, "#pending tbody tr[data-approval-id^='edit_file:']")))
        shot(b, "pending")
        assert not fut.done()
        row.find_element(By.CSS_SELECTOR, "a.approval-link").click()
        diff = WebDriverWait(b, 20).until(EC.presence_of_element_located((By.ID, "diff")))
        assert "-debug = True" in diff.text and "+debug = False" in diff.text
        assert evil in diff.text, "attacker text is shown as text"
        assert b.title != "pwned" and not b.find_elements(By.CSS_SELECTOR, "#main img")
        shot(b, "approval")
        b.find_element(By.ID, "reason").send_keys("reviewed the diff")
        b.find_element(By.ID, "approve").click()
        res = fut.result(30)
        assert res["result"]["results"][0]["status"] == "succeeded", res
        assert s.ran and s.ran[0]["path"] == "src/app.py"
        WebDriverWait(b, 20).until(EC.presence_of_element_located((By.CSS_SELECTOR, "#summary [data-status='allowed']")))
        history = b.find_element(By.ID, "history").text
        assert "reviewed the diff" in history and "car-server:operator:dashboard-" in history, history

        # A shell ask shows the command and the rule that matched.
        b.get(daemon.dash + "/")
        WebDriverWait(b, 20).until(EC.text_to_be_present_in_element((By.ID, "live"), "live"))
        fut = s.submit(proposal([tool_call("s1", "shell", parameters={"command": "git push origin main"})], "dash-2"))
        row = WebDriverWait(b, 20).until(
            EC.presence_of_element_located((By.CSS_SELECTOR, "#pending tbody tr:first-child")))
        row.find_element(By.CSS_SELECTOR, "a.approval-link").click()
        cmd = WebDriverWait(b, 20).until(EC.presence_of_element_located((By.ID, "shell-command")))
        assert cmd.text == "git push origin main"
        assert b.find_element(By.ID, "rule").text  # the rule that asked (or the tier layer)
        deny = WebDriverWait(b, 10).until(EC.presence_of_element_located((By.ID, "deny")),
                                          message=b.find_element(By.ID, "summary").text)
        deny.click()
        err = fut.result(30)["error"]
        assert err["code"] == -32003

        # Decided elsewhere: gone from the open page within a second (live).
        b.get(daemon.dash + "/")
        WebDriverWait(b, 20).until(EC.text_to_be_present_in_element((By.ID, "live"), "live"))
        fut = s.submit(proposal([tool_call("s2", "shell", parameters={"command": "make release"})], "dash-3"))
        WebDriverWait(b, 20).until(
            EC.presence_of_element_located((By.CSS_SELECTOR, "#pending tbody tr:first-child")))

        async def other():
            a = await Client.connect(daemon.url)
            await a.call("session.auth", {"token": OP})
            pending = await a.call("host.approvals")
            await a.call("host.resolve_approval", {"approval_id": pending["approvals"][0]["approval_id"], "resolution": "approve"})
            await a.close()

        s.run(other())
        WebDriverWait(b, 5).until_not(
            EC.presence_of_element_located((By.CSS_SELECTOR, "#pending tbody tr:first-child")))
        assert fut.result(30)["result"]["results"][0]["status"] == "succeeded"

        b.get(daemon.dash + "/proposals")
        WebDriverWait(b, 20).until(EC.presence_of_element_located((By.CSS_SELECTOR, "#proposals tr[data-proposal-id='dash-1']")))
        shot(b, "proposals")

        b.get(daemon.dash + "/events?session=" + s.session_id)
        status = WebDriverWait(b, 20).until(EC.presence_of_element_located((By.ID, "chain-status")))
        assert status.text.startswith("verified"), status.text
        b.find_element(By.ID, "f-kind").send_keys("AdmissionDecided")
        b.find_element(By.ID, "f-apply").click()
        kinds = "return [...document.querySelectorAll('#events tbody td:nth-child(2)')].map(e => e.textContent)"
        WebDriverWait(b, 20).until(lambda _: (lambda k: k and set(k) == {"AdmissionDecided"})(b.execute_script(kinds)))
        shot(b, "events")

        b.get(daemon.dash + "/config?session=" + s.session_id)
        adm = WebDriverWait(b, 20).until(EC.presence_of_element_located((By.ID, "admission")))
        assert '"edit_file"' in adm.text
        shot(b, "config")
    finally:
        s.close()


# Characters that must never reach the page raw (car_runtime::terminal::shown).
HIDDEN = re.compile("[\u0000-\u0009\u000b-\u001f\u007f-\u009f\u061c\u200b-\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069\ufeff]")


def test_a_proposals_control_and_bidi_characters_are_shown_escaped(daemon, browser):
    """A right-to-left override or a carriage return in a command, an action
    id or a parameter name would make the page show the approver something
    other than what runs: they are shown as escapes, in every place the
    approval's text appears."""
    b = browser
    sign_in(b, daemon)
    s = Submitter(daemon.url.rstrip("/"), {"ask": [{"tool": "shell"}]})
    try:
        cmd = "echo safe #\u202e\u2066 fr- mr\rrm -rf ~\x1b[2K\u200b"
        aid = "a\u202eb\rc"
        fut = s.submit(proposal([tool_call(aid, "shell", parameters={"command": cmd, "k\u202eey\x07": 1})], "dash-bidi"))
        b.get(daemon.dash + "/")
        row = WebDriverWait(b, 20).until(
            EC.presence_of_element_located((By.CSS_SELECTOR, "#pending tbody tr:first-child")))
        listed = b.execute_script("return document.getElementById('pending').textContent")
        assert not HIDDEN.search(listed), repr(listed)
        assert "a\\u{202e}b\\rc" in listed, repr(listed)
        row.find_element(By.CSS_SELECTOR, "a.approval-link").click()
        WebDriverWait(b, 20).until(EC.presence_of_element_located((By.ID, "shell-command")))
        page = b.execute_script("return document.getElementById('main').textContent")
        assert not HIDDEN.search(page), repr(page)
        shown = b.execute_script("return document.getElementById('shell-command').textContent")
        assert shown == "echo safe #\\u{202e}\\u{2066} fr- mr\\rrm -rf ~\\x1b[2K\\u{200b}", repr(shown)
        params = b.execute_script("return document.getElementById('params').textContent")
        assert "k\\u{202e}ey\\x07" in params, repr(params)
        b.find_element(By.ID, "deny").click()
        assert fut.result(30)["error"]["code"] == -32003
    finally:
        s.close()


def request(url, data=None, headers=None, method=None):
    req = urllib.request.Request(url, data=data, headers=headers or {}, method=method)
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def test_state_changes_need_the_csrf_token_and_the_same_origin(daemon, browser):
    sign_in(browser, daemon)
    cookie = "car_dashboard=" + browser.get_cookie("car_dashboard")["value"]
    page = request(daemon.dash + "/", headers={"Cookie": cookie})[1]
    csrf = re.search(r'name="csrf-token" content="([^"]+)"', page).group(1)
    url = daemon.dash + "/api/approval/nothing:0/decide"
    body = json.dumps({"resolution": "approve"}).encode()
    js = {"Content-Type": "application/json", "Cookie": cookie}
    # No CSRF token.
    status, text = request(url, body, js, "POST")
    assert status == 403 and json.loads(text)["error"]["code"] == "csrf"
    # The token, from another origin.
    status, text = request(url, body, {**js, "X-CSRF-Token": csrf, "Origin": "http://evil.example"}, "POST")
    assert status == 403 and json.loads(text)["error"]["code"] == "foreign_origin"
    # Both right: reaches the store (nothing pending by that id).
    status, text = request(url, body, {**js, "X-CSRF-Token": csrf, "Origin": daemon.dash}, "POST")
    assert status == 409 and json.loads(text)["error"]["code"] == "approval_not_pending", text
    # Without a session nothing but the sign-in page is served.
    for path in ["/", "/proposals", "/static/app.js", "/api/approvals", "/api/stream"]:
        status, text = request(daemon.dash + path)
        assert status in (401, 200) and ("Sign in" in text or "sign_in_required" in text), (path, status, text[:80])
    # A rebinding host name is refused.
    status, _ = request(daemon.dash + "/login", headers={"Host": "attacker.example"})
    assert status == 421
