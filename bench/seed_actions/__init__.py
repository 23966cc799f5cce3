"""The seed's sample as rasa-sdk 3.21.1 actions, for bench/real_actions.sh: the
select_subscription_change and apply_subscription_change tools of the guarding tutorial
(docs: "How to stop an AI agent acting on an outdated confirmation"), written from its
description, talking to the subscription service with aiohttp.

- select asks the service for the record, checks the account, and writes the change
  memory (subscription, label, effective date, entitlements, tag "ID TYPE rREVISION").
- apply reads the conversation from the events (the latest bot message whose
  metadata.utter_action is the confirmation response, answered when a customer message
  that does not start with "/" follows), asks the service for the record again, and sends
  the command only when the tag's revision is the record's, the date and the entitlements
  are still the service's and both appear in the question; otherwise it answers blocked
  with the current terms. The command carries If-Match with the tag's revision and an
  Idempotency-Key derived from the conversation, as the service's contract asks.

Start with: SUBSCRIPTIONS_URL=http://127.0.0.1:5056 python -m rasa_sdk --actions
seed_actions -p PORT (from bench/).
"""

import hashlib
import os
from datetime import datetime, timezone
from typing import Any, Dict, List, Optional, Text

import aiohttp
from rasa_sdk import Action, Tracker
from rasa_sdk.events import SlotSet
from rasa_sdk.executor import CollectingDispatcher

SERVICE = os.environ.get("SUBSCRIPTIONS_URL", "http://127.0.0.1:5056").rstrip("/")
CONFIRM_UTTER = "utter_confirm_subscription_change"
_session: Optional[aiohttp.ClientSession] = None


def session() -> aiohttp.ClientSession:
    global _session
    if _session is None or _session.closed:
        _session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=5))
    return _session


def change_tag(sub_id: str, change_type: str, revision: int) -> str:
    return f"{sub_id} {change_type} r{revision}"


def effective_text(iso: str) -> str:
    dt = datetime.strptime(iso, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=timezone.utc)
    return dt.strftime("%Y-%m-%d %H:%M UTC")


def account_of(tracker: Tracker) -> Optional[str]:
    meta = tracker.get_slot("session_started_metadata") or {}
    return meta.get("account_id") if isinstance(meta, dict) else None


async def get_record(sub_id: str) -> Optional[Dict[str, Any]]:
    async with session().get(f"{SERVICE}/v1/subscriptions/{sub_id}") as response:
        if response.status != 200:
            return None
        return await response.json()


def conversation_from_events(events: List[Dict[str, Any]]):
    users: List[str] = []
    question = None
    answered = False
    for event in events:
        kind = event.get("event")
        if kind == "user":
            text = event.get("text") or ""
            if text.startswith("/"):
                continue
            users.append(text)
            if question is not None:
                answered = True
        elif kind == "bot":
            metadata = event.get("metadata") or {}
            if metadata.get("utter_action") == CONFIRM_UTTER:
                question = event.get("text") or ""
                answered = False
    return question, answered, users


def outcome(dispatcher: CollectingDispatcher, status: str, reason: Optional[str], **extra) -> List[Dict]:
    body = {"status": status, "reason": reason, "effects": 1 if status == "applied" else 0, **extra}
    dispatcher.utter_message(response=f"utter_subscription_change_{status}", json_message=body)
    return [SlotSet("change_status", status), SlotSet("change_reason", reason)]


class SelectSubscriptionChange(Action):
    def name(self) -> Text:
        return "select_subscription_change"

    async def run(self, dispatcher: CollectingDispatcher, tracker: Tracker, domain: Dict[Text, Any]) -> List[Dict]:
        sub_id, change_type = tracker.get_slot("subscription"), tracker.get_slot("change_type")
        account = account_of(tracker)
        record = await get_record(sub_id) if sub_id else None
        if record is None or record.get("account") != account:
            return outcome(dispatcher, "denied", "not_owner")
        option = next((o for o in record["options"] if o["change_type"] == change_type), None)
        if option is None:
            return outcome(dispatcher, "blocked", "change_not_offered")
        memory = {
            "change_subscription": f"{record['id']} ({record['product']}, {record['plan']})",
            "change_label": option["label"],
            "change_effective": effective_text(option["effective_at"]),
            "change_entitlements": option["entitlements"],
            "change_tag": change_tag(record["id"], change_type, record["revision"]),
        }
        return [SlotSet(k, v) for k, v in memory.items()] + [SlotSet("change_status", "selected")]


class ApplySubscriptionChange(Action):
    def name(self) -> Text:
        return "apply_subscription_change"

    async def run(self, dispatcher: CollectingDispatcher, tracker: Tracker, domain: Dict[Text, Any]) -> List[Dict]:
        tag = tracker.get_slot("change_tag") or ""
        parts = tag.rsplit(" ", 2)
        if len(parts) != 3 or not parts[2].startswith("r"):
            return outcome(dispatcher, "blocked", "not_selected")
        sub_id, change_type, tag_rev = parts[0], parts[1], int(parts[2][1:])
        question, answered, _ = conversation_from_events(tracker.events)
        asked = question is not None and tag in question and answered
        record = await get_record(sub_id)
        if record is None or record.get("account") != account_of(tracker):
            return outcome(dispatcher, "denied", "not_owner")
        option = next((o for o in record["options"] if o["change_type"] == change_type), None)
        if option is None:
            return outcome(dispatcher, "blocked", "change_not_offered")
        effective = tracker.get_slot("change_effective")
        entitlements = tracker.get_slot("change_entitlements")
        disclosed = (
            tag_rev == record["revision"]
            and effective == effective_text(option["effective_at"])
            and entitlements == option["entitlements"]
            and asked
            and effective in question
            and entitlements in question
        )
        current = {
            "tag": change_tag(sub_id, change_type, record["revision"]),
            "effective": effective_text(option["effective_at"]),
            "entitlements": option["entitlements"],
        }
        if not disclosed:
            return outcome(dispatcher, "blocked", "benefit_loss_hidden", current=current)
        key = hashlib.sha256(f"{tracker.sender_id}|{tag}|{question}".encode()).hexdigest()
        async with session().post(
            f"{SERVICE}/v1/subscriptions/{sub_id}/changes",
            json={"change_type": change_type},
            headers={"If-Match": f'"r{tag_rev}"', "Idempotency-Key": key},
        ) as response:
            if response.status in (200, 201):
                return outcome(dispatcher, "applied", None, current=current)
            return outcome(dispatcher, "failed", "service_rejected")
