"""The Mantle forwarder (skills/subscription_change/tools.py) against a real actiongate."""

from __future__ import annotations

import asyncio
import inspect
import json
import re
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from conftest import free_port

TOOL_NAMES = (
    "list_subscriptions",
    "select_subscription_change",
    "apply_subscription_change",
    "check_subscription_change",
)

STYLE_BOX_R4 = "October to December boxes ship as usual; no charge on 2027-01-01"
STYLE_BOX_R5 = "October box ships 2026-10-05 (paid); no charge on 2027-01-01; no refund"
CHARGED_EARLY = "The October Style Box was charged early, on 2026-09-30, while this chat was open."


def run(coroutine):
    return asyncio.run(coroutine)


# --- the signatures -----------------------------------------------------------------------


def test_no_tool_takes_dates_amounts_or_facts(tools):
    """The model passes what the customer wants, never the terms: no date, amount,
    revision, tag or entitlement parameter, on any tool."""
    forbidden = re.compile(
        r"date|time|when|effective|amount|price|fee|cost|total|revision|rev|version|etag|"
        r"tag|term|entitle|label|refund|charge",
        re.IGNORECASE,
    )
    for name in TOOL_NAMES:
        tool = getattr(tools, name)
        assert inspect.iscoroutinefunction(tool), name
        parameters = inspect.signature(tool).parameters
        assert set(parameters) <= {"subscription", "change_type", "context"}, (name, list(parameters))
        assert "context" in parameters and parameters["context"].default is None, name
        for parameter in parameters:
            assert not forbidden.search(parameter), (name, parameter)


# --- the request actiongate receives ------------------------------------------------------


class _Recorder(BaseHTTPRequestHandler):
    seen: list = []

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        type(self).seen.append((self.path, dict(self.headers), body))
        answer = json.dumps({
            "events": [{"event": "slot", "name": "change_status", "value": "blocked"},
                       {"event": "slot", "name": "change_reason", "value": "not_asked"}],
            "responses": [{"response": "utter_subscription_change_blocked", "reason": "not_asked",
                           "custom": {"status": "blocked", "reason": "not_asked", "effects": 0}}],
        }).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(answer)))
        self.end_headers()
        self.wfile.write(answer)

    def log_message(self, *args):
        pass


def test_the_request_is_the_webhook_request_rasa_would_send(tools, make_context, monkeypatch):
    server = ThreadingHTTPServer(("127.0.0.1", free_port()), _Recorder)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    _Recorder.seen = []
    monkeypatch.setenv("ACTIONGATE_URL", f"http://127.0.0.1:{server.server_address[1]}/webhook")
    monkeypatch.setenv("ACTIONGATE_TOKEN", "secret")
    try:
        context = make_context()
        context.memory.values.update({"subscription": "WS-SUB-3310", "change_tag": "WS-SUB-3304 stop_renewal r4"})
        outcome = run(context.call(tools.apply_subscription_change, "WS-SUB-3304", "stop_renewal"))
    finally:
        server.shutdown()
        server.server_close()

    path, headers, body = _Recorder.seen[0]
    assert path == "/webhook"
    assert headers["Authorization"] == "Bearer secret"
    assert body["next_action"] == "apply_subscription_change"
    assert body["version"] == "3.21.0"
    assert body["sender_id"] == context.sender_id == body["tracker"]["sender_id"]
    slots = body["tracker"]["slots"]
    # memory, with the tool's arguments on top, and the session's account
    assert slots["subscription"] == "WS-SUB-3304"
    assert slots["change_type"] == "stop_renewal"
    assert slots["change_tag"] == "WS-SUB-3304 stop_renewal r4"
    assert slots["session_started_metadata"] == {"account_id": "acct-7"}
    assert body["tracker"]["latest_message"] == {}
    # no response texts: the engine renders the question, so its terms are what is held
    assert body["domain"] == {"responses": {}}
    assert body["tracker"]["events"][-1] == {
        "event": "action", "timestamp": body["tracker"]["events"][-1]["timestamp"],
        "name": "apply_subscription_change"}
    # the answer: custom payload returned, slots written, response passed on
    assert outcome == {"status": "blocked", "reason": "not_asked", "effects": 0}
    assert context.memory.writes == [("change_status", "blocked"), ("change_reason", "not_asked")]
    assert [m["response"] for m in context.messages] == ["utter_subscription_change_blocked"]


def test_unreachable_actiongate_fails_closed(tools, make_context, monkeypatch):
    monkeypatch.setenv("ACTIONGATE_URL", f"http://127.0.0.1:{free_port()}/webhook")
    context = make_context()
    outcome = run(context.call(tools.apply_subscription_change, "WS-SUB-3304", "stop_renewal"))
    assert outcome["status"] == "blocked"
    assert outcome["reason"] == "service_unavailable"
    assert outcome["effects"] == 0
    assert context.memory.get("change_status") == "blocked"


# --- against actiongate -------------------------------------------------------------------


def test_list_subscriptions_shows_the_accounts_own(tools, actiongate, make_context):
    context = make_context("acct-7")
    outcome = run(context.call(tools.list_subscriptions))
    ids = [s["id"] for s in outcome["subscriptions"]]
    assert ids == ["WS-SUB-3304", "WS-SUB-3310"]
    assert [s["id"] for s in context.memory.get("subscriptions")] == ids

    other = make_context("acct-9")
    outcome = run(other.call(tools.list_subscriptions))
    assert [s["id"] for s in outcome["subscriptions"]] == ["WS-SUB-4410"]


def test_select_writes_the_services_terms_into_memory(tools, actiongate, make_context):
    context = make_context()
    context.user_says("Please stop the renewal of my Style Box")
    outcome = run(context.call(tools.select_subscription_change, "WS-SUB-3304", "stop_renewal"))
    assert outcome["change_status"] == "selected"
    memory = context.memory.values
    assert memory["change_subscription"] == "WS-SUB-3304 (Style Box, monthly)"
    assert memory["change_label"] == "Stop renewal at the end of the current period"
    assert memory["change_effective"] == "2027-01-01 00:00 UTC"
    assert memory["change_entitlements"] == STYLE_BOX_R4
    assert memory["change_tag"] == "WS-SUB-3304 stop_renewal r4"
    assert context.messages == []  # the question is the engine's, not the tool's


def test_yes_to_the_question_applies_once(tools, actiongate, make_context):
    context = make_context()
    context.user_says("Please stop the renewal of WS-SUB-3304")
    run(context.call(tools.select_subscription_change, "WS-SUB-3304", "stop_renewal"))
    question = context.ask_confirmation()
    assert "2027-01-01 00:00 UTC" in question and STYLE_BOX_R4 in question
    context.user_says("Yes, go ahead")
    context.resolve_confirmation(True)

    outcome = run(context.call(tools.apply_subscription_change, "WS-SUB-3304", "stop_renewal"))
    assert outcome["status"] == "applied", outcome
    assert outcome["effects"] == 1
    assert context.memory.get("change_status") == "applied"
    assert actiongate.subscription("WS-SUB-3304")["revision"] == 5

    # the same "yes" again (a retry): the first outcome, no second change
    again = run(context.call(tools.apply_subscription_change, "WS-SUB-3304", "stop_renewal"))
    assert again["status"] == "applied", again
    assert actiongate.subscription("WS-SUB-3304")["revision"] == 5

    checked = run(context.call(tools.check_subscription_change))
    assert context.memory.get("change_status") == "applied", checked


def test_apply_without_the_question_changes_nothing(tools, actiongate, make_context):
    context = make_context()
    context.user_says("Please stop the renewal of WS-SUB-3304")
    run(context.call(tools.select_subscription_change, "WS-SUB-3304", "stop_renewal"))
    context.user_says("yes")
    outcome = run(context.call(tools.apply_subscription_change, "WS-SUB-3304", "stop_renewal"))
    assert (outcome["status"], outcome["reason"]) == ("blocked", "not_asked"), outcome
    assert actiongate.subscription("WS-SUB-3304")["revision"] == 4


def test_a_different_target_than_selected_is_refused(tools, actiongate, make_context):
    context = make_context()
    context.user_says("Please stop the renewal of WS-SUB-3304")
    run(context.call(tools.select_subscription_change, "WS-SUB-3304", "stop_renewal"))
    context.ask_confirmation()
    context.user_says("yes")
    context.resolve_confirmation(True)
    outcome = run(context.call(tools.apply_subscription_change, "WS-SUB-3310", "stop_renewal"))
    assert (outcome["status"], outcome["reason"]) == ("blocked", "target_mismatch"), outcome
    assert actiongate.subscription("WS-SUB-3310")["revision"] == 2


def test_style_box_race_blocks_then_asks_again(tools, actiongate, make_context):
    context = make_context()
    context.user_says("Please stop the renewal of WS-SUB-3304")
    run(context.call(tools.select_subscription_change, "WS-SUB-3304", "stop_renewal"))
    context.ask_confirmation()

    # while the question is open, the October box is charged early: revision 5
    record = actiongate.subscription("WS-SUB-3304")
    record.pop("revision")
    stop = next(o for o in record["options"] if o["change_type"] == "stop_renewal")
    stop["entitlements"] = STYLE_BOX_R5
    record["notes"] = record.get("notes", []) + [
        {"revision": 5, "at": "2026-09-30T08:00:00Z", "text": CHARGED_EARLY}
    ]
    assert actiongate.put_subscription(record)["revision"] == 5

    context.user_says("Yes, go ahead")
    context.resolve_confirmation(True)
    outcome = run(context.call(tools.apply_subscription_change, "WS-SUB-3304", "stop_renewal"))
    assert (outcome["status"], outcome["reason"]) == ("blocked", "benefit_loss_hidden"), outcome
    assert outcome["effects"] == 0
    assert outcome["current"]["tag"] == "WS-SUB-3304 stop_renewal r5"
    assert outcome["current"]["entitlements"] == STYLE_BOX_R5
    assert outcome["why"] == CHARGED_EARLY
    assert actiongate.subscription("WS-SUB-3304")["revision"] == 5  # nothing sent

    # the skill's step 5: select again, ask again with the new terms, apply on a new yes
    run(context.call(tools.select_subscription_change, "WS-SUB-3304", "stop_renewal"))
    assert context.memory.get("change_tag") == "WS-SUB-3304 stop_renewal r5"
    question = context.ask_confirmation()
    assert STYLE_BOX_R5 in question and "r5" in question
    context.user_says("Yes, go ahead")
    context.resolve_confirmation(True)
    outcome = run(context.call(tools.apply_subscription_change, "WS-SUB-3304", "stop_renewal"))
    assert outcome["status"] == "applied", outcome
    assert actiongate.subscription("WS-SUB-3304")["revision"] == 6


def test_another_accounts_subscription_is_denied(tools, actiongate, make_context):
    context = make_context("acct-9")
    context.user_says("Please stop the renewal of WS-SUB-3304")
    outcome = run(context.call(tools.select_subscription_change, "WS-SUB-3304", "stop_renewal"))
    # Exactly what an id that does not exist gets: nothing tells a stranger which ids exist.
    assert (outcome["status"], outcome["reason"]) == ("blocked", "unknown_subscription"), outcome
    assert "current" not in outcome and "why" not in outcome
    assert context.memory.get("change_tag") is None
    assert [m["response"] for m in context.messages] == ["utter_subscription_change_blocked"]


# --- the customer's answer to the held call ------------------------------------------------


def test_a_declined_call_changes_nothing_even_when_apply_runs(tools, actiongate, make_context):
    """The engine recorded a no; the model (or a misfiring rule) calls apply anyway."""
    context = make_context()
    context.user_says("Please stop the renewal of WS-SUB-3304")
    run(context.call(tools.select_subscription_change, "WS-SUB-3304", "stop_renewal"))
    context.ask_confirmation()
    context.user_says("No, leave it")
    context.resolve_confirmation(False)
    context.user_says("ok thanks")
    outcome = run(context.call(tools.apply_subscription_change, "WS-SUB-3304", "stop_renewal"))
    assert (outcome["status"], outcome["reason"]) == ("blocked", "declined"), outcome
    assert outcome["effects"] == 0
    record = actiongate.subscription("WS-SUB-3304")
    assert (record["revision"], record["status"]) == (4, "active")


def test_without_the_engines_record_a_yes_is_not_consent(tools, actiongate, make_context):
    """Words alone are not read: no recorded answer, no change."""
    context = make_context()
    context.user_says("Please stop the renewal of WS-SUB-3304")
    run(context.call(tools.select_subscription_change, "WS-SUB-3304", "stop_renewal"))
    context.ask_confirmation()
    context.user_says("Yes, go ahead")
    outcome = run(context.call(tools.apply_subscription_change, "WS-SUB-3304", "stop_renewal"))
    assert (outcome["status"], outcome["reason"]) == ("blocked", "not_confirmed"), outcome
    record = actiongate.subscription("WS-SUB-3304")
    assert (record["revision"], record["status"]) == (4, "active")
