#!/usr/bin/env python3
"""Writes the request bodies the benchmark posts (stdlib only).

* ``events-<N>.json`` for N in 10, 1000, 10000: a Rasa 3.6-shaped webhook request
  (like tests/fixtures/rasa-3.6.21/*.json) whose tracker holds exactly N events drawn
  from realistic conversation turns (action_listen, user with parse_data and
  metadata, user_featurization, custom action, slot events, utter action, bot with
  metadata.utter_action), with ``next_action`` = ``count_events``. The answer must be
  ``{"events":[{"event":"slot",...,"name":"event_count","value":N}],...}``.
* ``apply.json``: an ``apply_subscription_change`` request whose tracker holds a
  confirmed change (select -> change memory slots -> confirmation question -> "yes")
  for WS-SUB-3304 stop_renewal r4 of data/demo_subscriptions.json, account acct-7.

* with ``--real``, ``select-<N>.json`` and ``apply-<N>.json``: the real actions at N events
  (bench/real_actions.sh): earlier turns, then the customer asking to stop the renewal of
  WS-SUB-3304 (select), or the same conversation asked and answered "yes" (apply).

* with ``--pro`` as well, ``select-pro-<N>.json`` and ``apply-pro-<N>.json``: the same
  conversations with every customer turn's ``parse_data`` as Rasa Pro's NLU pipeline writes
  it (an intent ranking of ten, entities with their extractor and processors, the response
  selector's output with its rankings), so the history's bytes are mostly customer turns.

Usage: make_bodies.py OUT_DIR [--sizes 10,1000,10000] [--real] [--pro]
"""

import argparse
import json
import os
import random
import sys
from datetime import datetime, timezone

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)

MODEL_META = {
    "model_id": "0810b3c6a21946a3bd4a4bf112e5a73f",
    "assistant_id": "subscription-change-probe",
}

DOMAIN = {
    "version": "3.1",
    "intents": ["affirm", "deny", "greet", "request_stop_renewal", "list_subscriptions"],
    "entities": ["subscription", "change_type"],
    "slots": {
        name: {"type": "text", "influence_conversation": False, "mappings": [{"type": "custom"}]}
        for name in (
            "change_subscription",
            "change_label",
            "change_effective",
            "change_entitlements",
            "change_tag",
            "change_status",
            "change_reason",
            "event_count",
        )
    },
    "responses": {
        "utter_confirm_subscription_change": [
            {
                "text": "Please confirm this change to your {change_subscription}: {change_label}. "
                "It takes effect {change_effective}. What changes for you: {change_entitlements}. "
                "(Change {change_tag}.) Shall I make this change? If you meant a different "
                "change, say which."
            }
        ],
        "utter_change_not_made": [{"text": "OK, I have not changed anything."}],
        "utter_greet": [{"text": "Hello! How can I help with your subscriptions?"}],
    },
    "actions": [
        "count_events",
        "list_subscriptions",
        "select_subscription_change",
        "apply_subscription_change",
        "check_subscription_change",
    ],
    "session_config": {"session_expiration_time": 60, "carry_over_slots_to_new_session": True},
}

UTTERANCES = [
    ("greet", "hello there"),
    ("list_subscriptions", "which subscriptions do I have with you at the moment?"),
    ("request_stop_renewal", "please stop the renewal of my Style Box, I am moving abroad"),
    ("deny", "no, not that one"),
    ("affirm", "yes"),
]


def tokens(text):
    out, pos = [], 0
    for word in text.split(" "):
        out.append([pos, pos + len(word)])
        pos += len(word) + 1
    return out


# Whether customer turns carry Rasa Pro's full parse_data (--pro).
SHAPE = {"pro": False}

PRO_INTENTS = [
    "greet", "list_subscriptions", "request_stop_renewal", "deny", "affirm",
    "faq", "chitchat", "goodbye", "request_resume_renewal", "out_of_scope",
]
RETRIEVAL = ["faq/ask_billing", "faq/ask_delivery", "faq/ask_pause", "faq/ask_refund",
             "faq/ask_address", "chitchat/ask_weather", "chitchat/ask_name",
             "chitchat/ask_bot", "chitchat/thanks", "chitchat/how_are_you"]


def pro_parse_data(rng, intent, text, message_id, metadata):
    """parse_data as Rasa Pro's NLU pipeline (DIET, regex and synonym processors, a
    response selector) writes it for one customer turn."""
    ranking = [{"name": intent, "confidence": 0.9731}] + [
        {"name": other, "confidence": round(rng.random() * 0.02, 8)}
        for other in PRO_INTENTS if other != intent
    ][:9]
    entities = [
        {"entity": "change_type", "start": 7, "end": 22, "confidence_entity": round(0.99 - rng.random() * 0.01, 8),
         "role": None, "group": None, "value": "stop_renewal", "extractor": "DIETClassifier",
         "processors": ["EntitySynonymMapper"]},
        {"entity": "subscription", "start": 30, "end": 41, "value": "Style Box",
         "extractor": "RegexEntityExtractor"},
        {"entity": "time", "start": 45, "end": 57, "text": "next january", "value": "2027-01-01T00:00:00.000+00:00",
         "confidence": 1.0, "additional_info": {"values": [{"value": "2027-01-01T00:00:00.000+00:00",
                                                             "grain": "month", "type": "value"}],
                                                "value": "2027-01-01T00:00:00.000+00:00", "grain": "month",
                                                "type": "value"},
         "extractor": "DucklingEntityExtractor"},
    ]

    def selector(prefix):
        keys = [k for k in RETRIEVAL if k.startswith(prefix)] or RETRIEVAL
        top = keys[0]
        return {
            "response": {"responses": [{"text": "Our boxes ship on the first working day of each month."}],
                         "confidence": 0.9142, "intent_response_key": top,
                         "utter_action": "utter_" + top},
            "ranking": [{"confidence": round(0.9142 if k == top else rng.random() * 0.05, 8),
                         "intent_response_key": k} for k in RETRIEVAL],
        }

    return {
        "intent": {"name": intent, "confidence": 0.9731},
        "entities": entities,
        "text": text,
        "message_id": message_id,
        "metadata": metadata,
        "text_tokens": tokens(text),
        "intent_ranking": ranking,
        "response_selector": {
            "all_retrieval_intents": ["faq", "chitchat"],
            "default": selector(""),
            "faq": selector("faq/"),
            "chitchat": selector("chitchat/"),
        },
    }


def parse_data(rng, intent, text, message_id, metadata):
    if SHAPE["pro"]:
        return pro_parse_data(rng, intent, text, message_id, metadata)
    ranking = [{"name": intent, "confidence": 0.97}] + [
        {"name": other, "confidence": round(rng.random() * 0.03, 6)}
        for other, _ in UTTERANCES
        if other != intent
    ]
    entities = []
    if intent == "request_stop_renewal":
        entities.append(
            {
                "entity": "change_type",
                "start": 7,
                "end": 22,
                "value": "stop_renewal",
                "confidence_entity": 0.9981,
                "extractor": "DIETClassifier",
            }
        )
    return {
        "intent": {"name": intent, "confidence": 0.97},
        "entities": entities,
        "text": text,
        "message_id": message_id,
        "metadata": metadata,
        "intent_ranking": ranking,
        "text_tokens": tokens(text),
    }


class Clock:
    def __init__(self, start=1796027823.2731738):
        self.t = start

    def tick(self, step=0.0021):
        self.t += step
        return round(self.t, 7)


def action(clock, name, policy=None, confidence=None, hide=False):
    return {
        "event": "action",
        "timestamp": clock.tick(),
        "metadata": dict(MODEL_META),
        "name": name,
        "policy": policy,
        "confidence": confidence,
        "action_text": None,
        "hide_rule_turn": hide,
    }


def slot(clock, name, value):
    return {
        "event": "slot",
        "timestamp": clock.tick(0.0000021),
        "metadata": dict(MODEL_META),
        "name": name,
        "value": value,
    }


def user(clock, rng, intent, text, channel_meta):
    message_id = "%032x" % rng.getrandbits(128)
    return {
        "event": "user",
        "timestamp": clock.tick(2.7),
        "metadata": dict(channel_meta, **MODEL_META),
        "text": text,
        "parse_data": parse_data(rng, intent, text, message_id, dict(channel_meta)),
        "input_channel": "rest",
        "message_id": message_id,
    }


def featurization(clock):
    return {"event": "user_featurization", "timestamp": clock.tick(), "use_text_for_featurization": False}


def bot(clock, utter_action, text):
    meta = dict(MODEL_META)
    if utter_action:
        meta = dict({"utter_action": utter_action}, **MODEL_META)
    return {
        "event": "bot",
        "timestamp": clock.tick(),
        "metadata": meta,
        "text": text,
        "data": {
            "elements": None,
            "quick_replies": None,
            "buttons": None,
            "attachment": None,
            "image": None,
            "custom": None,
        },
    }


def session_start(clock, start_meta):
    return [
        slot(clock, "session_started_metadata", start_meta),
        action(clock, "action_session_start", confidence=1.0),
        {"event": "session_started", "timestamp": clock.tick(), "metadata": dict(MODEL_META)},
        slot(clock, "session_started_metadata", start_meta),
        action(clock, "action_listen"),
    ]


def conversation_events(n, seed=7):
    """Exactly n events, cycling through realistic turns."""
    rng = random.Random(seed)
    clock = Clock()
    start_meta = {"client": "web", "account_id": "acct-7"}
    events = session_start(clock, start_meta)
    turn = 0
    while len(events) < n:
        intent, text = UTTERANCES[turn % len(UTTERANCES)]
        turn += 1
        events.append(user(clock, rng, intent, text, {"client": "web"}))
        events.append(featurization(clock))
        if intent == "request_stop_renewal":
            events.append(action(clock, "select_subscription_change", "RulePolicy", 1.0))
            for name, value in (
                ("change_subscription", "WS-SUB-3304 (Style Box, monthly)"),
                ("change_label", "Stop renewal at the end of the current period"),
                ("change_effective", "2027-01-01 00:00 UTC"),
                ("change_entitlements", "October to December boxes ship as usual; no charge on 2027-01-01"),
                ("change_tag", "WS-SUB-3304 stop_renewal r4"),
                ("change_status", "selected"),
            ):
                events.append(slot(clock, name, value))
            events.append(action(clock, "utter_confirm_subscription_change", "RulePolicy", 1.0, True))
            events.append(bot(clock, "utter_confirm_subscription_change", "Please confirm this change ..."))
        elif intent == "list_subscriptions":
            events.append(action(clock, "list_subscriptions", "RulePolicy", 1.0))
            events.append(slot(clock, "subscriptions", [{"id": "WS-SUB-3304", "product": "Style Box"}]))
            events.append(bot(clock, "utter_list_subscriptions", "Here are your subscriptions: Style Box"))
        else:
            events.append(action(clock, "utter_greet", "TEDPolicy", 0.93))
            events.append(bot(clock, "utter_greet", "Hello! How can I help with your subscriptions?"))
        events.append(action(clock, "action_listen", "RulePolicy", 1.0))
    return events[:n]


def request(events, next_action, slots, sender="bench-user-1"):
    last_user = next((e for e in reversed(events) if e["event"] == "user"), None)
    latest_message = last_user["parse_data"] if last_user else {}
    return {
        "next_action": next_action,
        "sender_id": sender,
        "tracker": {
            "sender_id": sender,
            "slots": slots,
            "latest_message": latest_message,
            "latest_event_time": events[-1]["timestamp"] if events else None,
            "followup_action": None,
            "paused": False,
            "events": events,
            "latest_input_channel": "rest",
            "active_loop": {},
            "latest_action": {"action_name": "action_listen"},
            "latest_action_name": "action_listen",
        },
        "domain": DOMAIN,
        "version": "3.6.21",
    }


def count_body(n):
    slots = {name: None for name in DOMAIN["slots"]}
    slots["session_started_metadata"] = {"client": "web", "account_id": "acct-7"}
    return request(conversation_events(n), "count_events", slots)


def fmt_effective(iso):
    dt = datetime.strptime(iso, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=timezone.utc)
    return dt.strftime("%Y-%m-%d %H:%M UTC")


def confirmation_text(memory):
    # The project's template (responses/subscription_change.yml), as Rasa renders it.
    return (
        "Please confirm this change to your {change_subscription}: {change_label}. It takes "
        "effect {change_effective}. What changes for you: {change_entitlements}. (Change "
        "{change_tag}.) Shall I make this change? If you meant a different change, say which."
    ).format(**memory)


def apply_body(n=None, stop_at_request=False):
    with open(os.path.join(REPO, "data", "demo_subscriptions.json")) as f:
        subs = json.load(f)
    sub = next(s for s in subs if s["id"] == "WS-SUB-3304")
    option = next(o for o in sub["options"] if o["change_type"] == "stop_renewal")
    memory = {
        "change_subscription": "%s (%s, %s)" % (sub["id"], sub["product"], sub["plan"]),
        "change_label": option["label"],
        "change_effective": fmt_effective(option["effective_at"]),
        "change_entitlements": option["entitlements"],
        "change_tag": "%s %s r%d" % (sub["id"], option["change_type"], sub["revision"]),
    }
    rng = random.Random(3304)
    clock = Clock()
    start_meta = {"account_id": sub["account"]}
    events = session_start(clock, start_meta)
    if n is not None:
        # Earlier turns (greetings, listings), so the tracker holds n events in all.
        tail = 2 if stop_at_request else 15
        filler = [e for e in conversation_events(2 * n + 50, seed=11)[5:] if e.get("name") != "select_subscription_change"
                  and not (e["event"] == "bot" and (e.get("metadata") or {}).get("utter_action") == "utter_confirm_subscription_change")]
        filler = [e for e in filler if not (e["event"] == "slot" and e["name"].startswith("change_"))]
        for e in filler[: max(0, n - len(events) - tail)]:
            e = dict(e)
            e["timestamp"] = clock.tick()
            events.append(e)
    events.append(user(clock, rng, "request_stop_renewal", "please stop the renewal of WS-SUB-3304", {}))
    events.append(featurization(clock))
    if stop_at_request:
        slots = {"subscription": sub["id"], "change_type": option["change_type"],
                 "session_started_metadata": start_meta}
        return request(events, "select_subscription_change", slots, sender="bench-select-1")
    events.append(action(clock, "select_subscription_change", "RulePolicy", 1.0))
    for name, value in memory.items():
        events.append(slot(clock, name, value))
    events.append(slot(clock, "change_status", "selected"))
    events.append(action(clock, "utter_confirm_subscription_change", "RulePolicy", 1.0, True))
    events.append(bot(clock, "utter_confirm_subscription_change", confirmation_text(memory)))
    events.append(action(clock, "action_listen", "RulePolicy", 1.0, True))
    events.append(user(clock, rng, "affirm", "yes", {}))
    events.append(featurization(clock))
    slots = dict(memory)
    slots.update(
        {
            "subscription": sub["id"],
            "change_type": option["change_type"],
            "change_status": "selected",
            "change_reason": None,
            "session_started_metadata": start_meta,
        }
    )
    return request(events, "apply_subscription_change", slots, sender="bench-apply-1")


def main(argv):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("out_dir")
    parser.add_argument("--sizes", default="10,1000,10000")
    parser.add_argument("--real", action="store_true")
    parser.add_argument("--pro", action="store_true")
    args = parser.parse_args(argv)
    os.makedirs(args.out_dir, exist_ok=True)
    for n in (int(s) for s in args.sizes.split(",")):
        body = count_body(n)
        assert len(body["tracker"]["events"]) == n
        path = os.path.join(args.out_dir, "events-%d.json" % n)
        with open(path, "w") as f:
            json.dump(body, f)  # default separators, as Rasa (aiohttp) sends it
        print("%s %d bytes" % (path, os.path.getsize(path)))
    path = os.path.join(args.out_dir, "apply.json")
    with open(path, "w") as f:
        json.dump(apply_body(), f)
    print("%s %d bytes" % (path, os.path.getsize(path)))
    if args.real:
        write_real(args.out_dir, args.sizes, "")
    if args.pro:
        SHAPE["pro"] = True
        write_real(args.out_dir, args.sizes, "pro-")
        SHAPE["pro"] = False


def write_real(out_dir, sizes, shape):
    """select-<shape><N>.json and apply-<shape><N>.json for each size."""
    for n in (int(s) for s in sizes.split(",")):
        for name, body in (("select", apply_body(n, stop_at_request=True)), ("apply", apply_body(n))):
            path = os.path.join(out_dir, "%s-%s%d.json" % (name, shape, n))
            with open(path, "w") as f:
                json.dump(body, f)
            print("%s %d bytes, %d events" % (path, os.path.getsize(path), len(body["tracker"]["events"])))

if __name__ == "__main__":
    main(sys.argv[1:])
