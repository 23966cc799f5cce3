"""The subscription-change tools for Rasa's Mantle engine: thin forwarders to actiongate.

Mantle runs a skill's tools in-process and does not call an `action_endpoint`, so each
tool here forwards its call to actiongate as the action-server webhook request Rasa would
have sent (`POST /webhook`), and brings the answer back:

* the request is `{"next_action": <tool name>, "sender_id", "tracker": {"sender_id",
  "slots", "events", "latest_message": {}}, "domain": {"responses": {}}, "version":
  "3.21.0"}`; the slots are the skill's memory with the tool's arguments on top, plus the
  session's start metadata (the authenticated account) as `session_started_metadata`;
  the events are the conversation's events as the engine keeps them. The engine renders
  the confirmation question from memory itself, so the domain carries no response texts:
  actiongate then holds the question to the terms it must read out (the tag, the label,
  the date and the entitlements line), not to a template (CONTRACT.md section 3);
* every `slot` event of the answer is written into memory (`context.memory.set`), so the
  change memory is exactly what actiongate's select wrote;
* the answer's responses are passed on to `context.send_message` when the context offers
  it (each a dict naming the response template and its variables);
* the tool returns the outcome object: the `custom` payload of the first response that
  has one, else `{"change_status", "change_reason"}` from the slot events.

The tools take only the subscription and the change type from the model: never a date,
an amount, terms or a revision. Those come from memory that only the select tool writes,
and actiongate compares them with the subscription service before it acts. For that
comparison actiongate reads the conversation's events: it trusts the change memory only
when the events show the slot events following the select tool's `action` event; the
question is the bot message produced by `utter_confirm_subscription_change` (its
`metadata.utter_action`), the reply is the first customer message after it, and that
reply is a yes only when the engine recorded the customer's answer to the held call as
confirmed: the `tool_executed` event of `resolve_tool_confirmation` with
`arguments.confirmed: true`, after the reply (a `false` there is a no, whatever else was
said). An engine that records none of this gets `blocked` outcomes, never a change.

Standard library only. `ACTIONGATE_URL` (default http://127.0.0.1:5055/webhook) says where
actiongate listens; `ACTIONGATE_TOKEN`, when set, is sent as `Authorization: Bearer`.
"""

from __future__ import annotations

import asyncio
import json
import os
import socket
import urllib.error
import urllib.request
from typing import Any, Dict, List, Optional

ACTIONGATE_URL_ENV = "ACTIONGATE_URL"
ACTIONGATE_TOKEN_ENV = "ACTIONGATE_TOKEN"
DEFAULT_ACTIONGATE_URL = "http://127.0.0.1:5055/webhook"
TIMEOUT_ENV = "ACTIONGATE_TIMEOUT"
DEFAULT_TIMEOUT_SECONDS = 15.0
# The Rasa version the request claims to come from (actiongate speaks Rasa Pro's protocol).
PROTOCOL_VERSION = "3.21.0"

# What the model may set: what the customer wants.
TARGET_FIELDS = ("subscription", "change_type")
# Written only by select_subscription_change (from actiongate's answer).
CHANGE_MEMORY_FIELDS = (
    "change_subscription",
    "change_label",
    "change_effective",
    "change_entitlements",
    "change_tag",
)
# Written by every tool.
OUTCOME_FIELDS = ("change_status", "change_reason")
MEMORY_FIELDS = TARGET_FIELDS + CHANGE_MEMORY_FIELDS + OUTCOME_FIELDS

SESSION_METADATA_SLOT = "session_started_metadata"

ToolResult = Dict[str, Any]


async def list_subscriptions(context: Any = None) -> ToolResult:
    """List the authenticated customer's subscriptions and the changes each one offers."""
    return await _forward("list_subscriptions", {}, context)


async def select_subscription_change(
    subscription: str, change_type: str, context: Any = None
) -> ToolResult:
    """Ask what the change would do now, and keep its terms in memory for the question.

    Call it before asking the customer to confirm, and again whenever a change was
    blocked because its terms moved.
    """
    arguments = {"subscription": subscription, "change_type": change_type}
    return await _forward("select_subscription_change", arguments, context)


async def apply_subscription_change(
    subscription: str, change_type: str, context: Any = None
) -> ToolResult:
    """Make the selected change, after the customer agreed to the terms they were shown.

    actiongate refuses (status `blocked`) when the terms in the question are no longer
    the subscription service's, and then nothing was changed.
    """
    arguments = {"subscription": subscription, "change_type": change_type}
    return await _forward("apply_subscription_change", arguments, context)


async def check_subscription_change(context: Any = None) -> ToolResult:
    """Find out whether a change whose outcome was left unknown went through."""
    return await _forward("check_subscription_change", {}, context)


# -----------------------------------------------------------------------------------------


async def _forward(action: str, arguments: Dict[str, Any], context: Any) -> ToolResult:
    request = _build_request(action, arguments, context)
    try:
        answer = await asyncio.to_thread(_post, request)
    except _Unsent as exc:
        # actiongate did not run the action: nothing can have been changed.
        return _local_outcome(context, "blocked", "service_unavailable", str(exc), effects=0)
    except _NoAnswer as exc:
        if action == "apply_subscription_change":
            # The request may have arrived: the change may have been made.
            # check_subscription_change resolves it (same conversation, same request key).
            return _local_outcome(
                context, "pending_verification", "outcome_unknown", str(exc), effects=None
            )
        return _local_outcome(context, "blocked", "service_unavailable", str(exc), effects=0)

    events = answer.get("events") or []
    responses = answer.get("responses") or []
    _write_memory(context, events)
    await _send_messages(context, responses)
    return _outcome(events, responses)


def _build_request(action: str, arguments: Dict[str, Any], context: Any) -> Dict[str, Any]:
    sender_id = _sender_id(context)
    slots: Dict[str, Any] = {}
    for field in MEMORY_FIELDS:
        value = _memory_get(context, field)
        if value is not None:
            slots[field] = value
    slots.update(arguments)
    metadata = _session_metadata(context)
    if metadata is not None:
        slots[SESSION_METADATA_SLOT] = metadata
    return {
        "next_action": action,
        "sender_id": sender_id,
        "tracker": {
            "sender_id": sender_id,
            "slots": slots,
            "events": _events(context),
            "latest_message": {},
        },
        # The engine renders the question itself: no response texts to hold it to.
        "domain": {"responses": {}},
        "version": PROTOCOL_VERSION,
    }


class _Unsent(Exception):
    """The request did not reach actiongate."""


class _NoAnswer(Exception):
    """The request may have reached actiongate, but no usable answer came back."""


def _post(request: Dict[str, Any]) -> Dict[str, Any]:
    url = os.environ.get(ACTIONGATE_URL_ENV) or DEFAULT_ACTIONGATE_URL
    timeout = float(os.environ.get(TIMEOUT_ENV) or DEFAULT_TIMEOUT_SECONDS)
    headers = {"Content-Type": "application/json", "Accept": "application/json"}
    token = os.environ.get(ACTIONGATE_TOKEN_ENV)
    if token:
        headers["Authorization"] = f"Bearer {token}"
    body = json.dumps(request).encode("utf-8")
    http_request = urllib.request.Request(url, data=body, headers=headers, method="POST")
    try:
        with urllib.request.urlopen(http_request, timeout=timeout) as response:
            payload = response.read()
    except urllib.error.HTTPError as exc:
        # actiongate answered with an error (JSON `{"error", "action_name"}`). A refusal
        # (4xx) ran nothing; after a failure (5xx) the outcome is not known.
        detail = exc.read().decode("utf-8", "replace")[:300]
        message = f"actiongate answered {exc.code}: {detail}"
        if exc.code >= 500:
            raise _NoAnswer(message) from exc
        raise _Unsent(message) from exc
    except urllib.error.URLError as exc:
        if isinstance(exc.reason, (socket.timeout, TimeoutError)):
            raise _NoAnswer(f"no answer from actiongate within {timeout}s") from exc
        raise _Unsent(f"actiongate unreachable at {url}: {exc.reason}") from exc
    except (socket.timeout, TimeoutError) as exc:
        raise _NoAnswer(f"no answer from actiongate within {timeout}s") from exc
    except OSError as exc:
        raise _NoAnswer(f"the connection to actiongate failed: {exc}") from exc
    try:
        answer = json.loads(payload)
    except ValueError as exc:
        raise _NoAnswer("actiongate's answer is not JSON") from exc
    if not isinstance(answer, dict):
        raise _NoAnswer("actiongate's answer is not an object")
    return answer


def _local_outcome(
    context: Any, status: str, reason: str, why: str, effects: Optional[int]
) -> ToolResult:
    """The outcome when actiongate gave no usable answer (the forwarder's own)."""
    _write_memory(
        context,
        [
            {"event": "slot", "name": "change_status", "value": status},
            {"event": "slot", "name": "change_reason", "value": reason},
        ],
    )
    return {"status": status, "reason": reason, "effects": effects, "why": why}


def _outcome(events: List[Dict[str, Any]], responses: List[Dict[str, Any]]) -> ToolResult:
    for response in responses:
        custom = response.get("custom") if isinstance(response, dict) else None
        if isinstance(custom, dict):
            return custom
    outcome: ToolResult = {}
    for event in events:
        if (
            isinstance(event, dict)
            and event.get("event") == "slot"
            and event.get("name") in OUTCOME_FIELDS
        ):
            outcome[event["name"]] = event.get("value")
    return outcome


# --- the engine's context, read defensively (the tools also run without one) ------------


def _sender_id(context: Any) -> str:
    for attribute in ("sender_id", "conversation_id", "session_id"):
        value = getattr(context, attribute, None)
        if isinstance(value, str) and value:
            return value
    return "mantle"


def _memory_get(context: Any, key: str) -> Any:
    memory = getattr(context, "memory", None)
    getter = getattr(memory, "get", None)
    if getter is None:
        return None
    try:
        return getter(key)
    except KeyError:
        return None


def _session_metadata(context: Any) -> Optional[Dict[str, Any]]:
    for attribute in ("session_started_metadata", "session_metadata", "metadata"):
        value = getattr(context, attribute, None)
        if isinstance(value, dict):
            return value
    value = _memory_get(context, SESSION_METADATA_SLOT)
    return value if isinstance(value, dict) else None


def _events(context: Any) -> List[Dict[str, Any]]:
    raw = getattr(context, "events", None)
    if raw is None:
        tracker = getattr(context, "tracker", None)
        raw = getattr(tracker, "events", None)
    events = []
    for event in raw or []:
        if isinstance(event, dict):
            events.append(event)
        elif hasattr(event, "as_dict"):
            events.append(event.as_dict())
    return events


def _write_memory(context: Any, events: List[Dict[str, Any]]) -> None:
    if context is None:
        return
    memory = getattr(context, "memory", None)
    if memory is None:
        return
    for event in events:
        if isinstance(event, dict) and event.get("event") == "slot" and "name" in event:
            memory.set(event["name"], event.get("value"))


async def _send_messages(context: Any, responses: List[Dict[str, Any]]) -> None:
    send = getattr(context, "send_message", None)
    if send is None:
        return
    for response in responses:
        result = send(response)
        if asyncio.iscoroutine(result):
            await result
