"""Fixtures for the Mantle forwarder's tests: the tools module, a real actiongate on free
ports with its embedded subscription service, and a stand-in for the engine's ToolContext.

The stand-in keeps what the engine would keep: memory (recording every write), the
messages sent, and the conversation's events in Rasa's shape. A tool call is recorded as
an `action` event named after the tool, and each memory write as a `slot` event after it;
the confirmation question is a `bot` event rendered from the project's response template
with `metadata.utter_action` naming it; the customer's answer to the held call is the
engine's `tool_executed` event for `resolve_tool_confirmation` with `arguments.confirmed`
(what Mantle records when the customer confirms or declines a `requires_confirmation`
tool). Customer messages carry no NLU intent, as in Mantle.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import socket
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any, Dict, List, Optional

import pytest

ROOT = Path(__file__).resolve().parents[2]
TOOLS_PATH = ROOT / "skills" / "subscription_change" / "tools.py"
RESPONSES_PATH = ROOT / "responses" / "subscription_change.yml"
CONFIRM = "utter_confirm_subscription_change"


@pytest.fixture(scope="session")
def tools():
    spec = importlib.util.spec_from_file_location("subscription_change_tools", TOOLS_PATH)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def http(method: str, url: str, body: Optional[Dict[str, Any]] = None):
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(
        url, data=data, method=method, headers={"Content-Type": "application/json"}
    )
    try:
        with urllib.request.urlopen(request, timeout=5) as response:
            return response.status, json.loads(response.read() or b"null")
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode("utf-8", "replace")


class Actiongate:
    def __init__(self, webhook: str, service: str):
        self.webhook = webhook
        self.service = service

    def subscription(self, sub_id: str) -> Dict[str, Any]:
        status, body = http("GET", f"{self.service}/v1/subscriptions/{sub_id}")
        assert status == 200, body
        return body

    def put_subscription(self, record: Dict[str, Any]) -> Dict[str, Any]:
        status, body = http("PUT", f"{self.service}/v1/subscriptions/{record['id']}", record)
        assert status == 200, body
        return body


@pytest.fixture
def actiongate(tmp_path, monkeypatch):
    """A fresh actiongate (fresh demo data) per test; ACTIONGATE_URL points at it."""
    binary = Path(os.environ.get("ACTIONGATE_BIN", ROOT / "target" / "debug" / "actiongate"))
    if not binary.exists():
        pytest.fail(f"{binary} is missing: run `cargo build` first (or set ACTIONGATE_BIN)")
    port, service_port = free_port(), free_port()
    endpoints = tmp_path / "endpoints.yml"
    endpoints.write_text(f'action_endpoint:\n  url: "http://127.0.0.1:{port}/webhook"\n')
    log = open(tmp_path / "actiongate.log", "w")
    process = subprocess.Popen(
        [
            str(binary), "serve",
            "--port", str(port),
            "--embedded-service-port", str(service_port),
            "--data-dir", str(tmp_path / "data"),
            "--endpoints", str(endpoints),
        ],
        cwd=ROOT,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    (tmp_path / "data").mkdir(exist_ok=True)
    gate = Actiongate(f"http://127.0.0.1:{port}/webhook", f"http://127.0.0.1:{service_port}")
    try:
        deadline = time.monotonic() + 30
        while True:
            if process.poll() is not None:
                pytest.fail("actiongate exited: " + (tmp_path / "actiongate.log").read_text())
            try:
                if (
                    http("GET", f"http://127.0.0.1:{port}/health")[0] == 200
                    and http("GET", f"{gate.service}/v1/subscriptions/WS-SUB-3304")[0] == 200
                ):
                    break
            except OSError:
                pass
            if time.monotonic() > deadline:
                pytest.fail("actiongate did not start: " + (tmp_path / "actiongate.log").read_text())
            time.sleep(0.1)
        monkeypatch.setenv("ACTIONGATE_URL", gate.webhook)
        yield gate
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        log.close()


def confirmation_template() -> str:
    """The text of utter_confirm_subscription_change (a folded `>-` block) in responses/."""
    lines = RESPONSES_PATH.read_text().splitlines()
    start = next(i for i, line in enumerate(lines) if line.strip() == f"{CONFIRM}:")
    text_line = next(i for i in range(start + 1, len(lines)) if "- text:" in lines[i])
    indent = None
    parts: List[str] = []
    for line in lines[text_line + 1 :]:
        if not line.strip():
            break
        current = len(line) - len(line.lstrip())
        if indent is None:
            indent = current
        if current < indent:
            break
        parts.append(line.strip())
    return " ".join(parts)


class Memory:
    def __init__(self, context: "StandInContext"):
        self._context = context
        self.values: Dict[str, Any] = {}
        self.writes: List[tuple] = []

    def get(self, key: str, default: Any = None) -> Any:
        return self.values.get(key, default)

    def set(self, key: str, value: Any) -> None:
        self.values[key] = value
        self.writes.append((key, value))
        self._context.events.append(
            {"event": "slot", "timestamp": time.time(), "name": key, "value": value}
        )


class StandInContext:
    """What the engine hands a tool as `context`, reduced to what the tools use."""

    def __init__(self, sender_id: str, account_id: Optional[str] = "acct-7"):
        self.sender_id = sender_id
        self.session_started_metadata = {"account_id": account_id} if account_id else {}
        now = time.time()
        self.events: List[Dict[str, Any]] = [
            {"event": "action", "timestamp": now, "name": "action_session_start"},
            {"event": "session_started", "timestamp": now},
            {"event": "slot", "timestamp": now, "name": "session_started_metadata",
             "value": self.session_started_metadata},
            {"event": "action", "timestamp": now, "name": "action_listen"},
        ]
        self.memory = Memory(self)
        self.messages: List[Dict[str, Any]] = []

    def send_message(self, message: Dict[str, Any]) -> None:
        self.messages.append(message)

    def user_says(self, text: str) -> None:
        self.events.append(
            {"event": "user", "timestamp": time.time(), "text": text,
             "parse_data": {"text": text}, "input_channel": "mantle", "metadata": {}}
        )

    def ask_confirmation(self) -> str:
        """The engine's requires_confirmation: render the question from memory, send it."""
        text = re.sub(
            r"\{(\w+)\}", lambda m: str(self.memory.get(m.group(1), "")), confirmation_template()
        )
        self.events.append(
            {"event": "bot", "timestamp": time.time(), "text": text,
             "metadata": {"utter_action": CONFIRM}}
        )
        return text

    def resolve_confirmation(self, confirmed: bool) -> None:
        """The engine records the customer's answer to the held call."""
        self.events.append(
            {"event": "tool_executed", "timestamp": time.time(),
             "tool_name": "resolve_tool_confirmation", "arguments": {"confirmed": confirmed},
             "result": json.dumps({"confirmed": confirmed}), "is_error": False,
             "metadata": {"source": "llm"}}
        )

    async def call(self, tool, *args: Any) -> Dict[str, Any]:
        """Run a tool as the engine does: the call is an event, then the tool runs."""
        self.events.append({"event": "action", "timestamp": time.time(), "name": tool.__name__})
        return await tool(*args, context=self)


@pytest.fixture
def make_context():
    counter = iter(range(1_000_000))

    def make(account_id: Optional[str] = "acct-7") -> StandInContext:
        return StandInContext(f"mantle-test-{os.getpid()}-{next(counter)}", account_id)

    return make
