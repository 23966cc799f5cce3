"""The validation conformance suite: the same HTTP webhook calls, as Rasa 3.6.21 sends them,
to rasa-sdk 3.21.1 (`python -m rasa_sdk --actions tests.validation.actions`) and to
actiongate's SDK (crates/actionserver/examples/validation.rs), both serving the same
validation actions: `action_validate_slot_mappings` (global slots), `validate_restaurant_form`
and `validate_booking_form` (which overrides `required_slots`). Compares the status and the
JSON body (every event and response, in order, every key and its type); prints one line a
case and exits non-zero on any difference not listed as deliberate. A difference only in the
order of an object's keys is noted, not counted.

The cases run in order against each server: rasa-sdk keeps the last non-empty domain it was
sent, and the `domain: {}` case relies on that.

Usage: python tests/validation/conformance.py RASA_SDK_PORT ACTIONGATE_PORT
"""

import json
import sys
import urllib.error
import urllib.request

GLOBAL, RESTAURANT, BOOKING = ("action_validate_slot_mappings", "validate_restaurant_form",
                               "validate_booking_form")


def mapping(kind, *loops, **extra):
    m = {"type": kind, **extra}
    if loops:
        m["conditions"] = [{"active_loop": loop} for loop in loops]
    return m


def slot(kind, *mappings):
    return {"type": kind, "influence_conversation": False, "mappings": list(mappings)}


SLOTS = {
    "phone": slot("text", mapping("from_text")),
    "email": slot("text", mapping("custom")),
    "nickname": slot("text", mapping("from_text")),
    "cuisine": slot("text", mapping("from_entity", "restaurant_form", "booking_form",
                                    entity="cuisine")),
    "num_people": slot("any", mapping("from_entity", "restaurant_form", "booking_form",
                                      entity="number")),
    "outdoor_seating": slot("bool", mapping("custom", "restaurant_form")),
    "vegetarian": slot("bool", mapping("from_intent", "booking_form", intent="affirm",
                                       value=True)),
    "requested_slot": slot("any", mapping("custom", "restaurant_form", "booking_form")),
}
FORMS = {"restaurant_form": {"required_slots": ["cuisine", "num_people", "outdoor_seating"]},
         "booking_form": {"required_slots": ["cuisine", "num_people"]}}
DOMAIN = {
    "version": "3.1",
    "intents": ["inform", "affirm", "deny"],
    "entities": ["cuisine", "number"],
    "slots": SLOTS,
    "forms": FORMS,
    "responses": {"utter_wrong_cuisine": [{"text": "We serve Thai, Indian or Italian."}],
                  "utter_ask_num_people": [{"text": "For how many people?"}]},
    "actions": [GLOBAL, RESTAURANT, BOOKING],
    "session_config": {"session_expiration_time": 60, "carry_over_slots_to_new_session": True},
}
NO_DOMAIN = object()


def domain_with(**changes):
    """DOMAIN with top-level keys replaced (a value of None drops the key)."""
    d = {k: v for k, v in DOMAIN.items() if k not in changes}
    d.update({k: v for k, v in changes.items() if v is not None})
    return d


def slot_event(name, value, t):
    return {"event": "slot", "timestamp": t, "name": name, "value": value}


def call(action, text="", trailing=(), before=(), after_user=(), loop=None,
         domain=DOMAIN, intent="inform"):
    """A webhook body as Rasa 3.6 sends it: the session start, `before` (slot events or
    whole events), an `active_loop` event when `loop`, `action_listen`, the user's `text`,
    `after_user` events, then the trailing slot candidates `trailing` ((name, value) pairs).
    The tracker's slots are what all those events set."""
    t = iter(1_700_000_000.0 + i / 8 for i in range(1000))
    parse = {"intent": {"name": intent, "confidence": 1.0}, "entities": [], "text": text,
             "message_id": "m-1", "metadata": {}}
    events = [{"event": "action", "timestamp": next(t), "name": "action_session_start",
               "policy": None, "confidence": 1.0},
              {"event": "session_started", "timestamp": next(t)}]
    if loop:
        events.append({"event": "active_loop", "timestamp": next(t), "name": loop})
    for e in before:
        events.append(slot_event(*e, next(t)) if isinstance(e, tuple) else e)
    events += [{"event": "action", "timestamp": next(t), "name": "action_listen",
                "policy": "RulePolicy", "confidence": 1.0},
               {"event": "user", "timestamp": next(t), "text": text, "parse_data": parse,
                "input_channel": "rest", "message_id": "m-1", "metadata": {}}]
    events += list(after_user)
    events += [slot_event(name, value, next(t)) for name, value in trailing]
    slots = {name: None for name in SLOTS}
    for e in events:
        if e["event"] == "slot":
            slots[e["name"]] = e["value"]
    body = {"next_action": action, "sender_id": "conformance", "version": "3.6.21",
            "tracker": {"sender_id": "conformance", "slots": slots,
                        "latest_message": {"text": text, "intent": parse["intent"],
                                           "entities": [], "message_id": "m-1",
                                           "metadata": {}},
                        "latest_event_time": events[-1]["timestamp"],
                        "followup_action": None, "paused": False, "events": events,
                        "latest_input_channel": "rest",
                        "active_loop": {"name": loop} if loop else {},
                        "latest_action": {"action_name": "action_listen"},
                        "latest_action_name": "action_listen"}}
    if domain is not NO_DOMAIN:
        body["domain"] = domain
    return body


FEATURIZATION = {"event": "user_featurization", "timestamp": 1_700_000_100.0,
                 "use_text_for_featurization": False}
INDIAN_FOR_TWO = (("cuisine", "indian"), ("num_people", 2))


def cases():
    r = dict(loop="restaurant_form")
    seating = dict(loop="restaurant_form", before=[("requested_slot", "outdoor_seating")])
    b = dict(loop="booking_form")
    return [
        # action_validate_slot_mappings: the slots without an active_loop condition.
        ("global: a formatted phone number, its digits",
         call(GLOBAL, "+1 (555) 123-4567", [("phone", "+1 (555) 123-4567")])),
        ("global: a phone number too short: a message and None",
         call(GLOBAL, "555-12", [("phone", "555-12")])),
        ("global: a phone number as an int", call(GLOBAL, "5551234567", [("phone", 5551234567)])),
        ("global: a phone number as a float: the digits of str(5551234.0)",
         call(GLOBAL, "5551234", [("phone", 5551234.0)])),
        ("global: a phone number None: too short", call(GLOBAL, "hm", [("phone", None)])),
        ("global: an email read from the text, no trailing slot event",
         call(GLOBAL, "mail me at Ada@Example.com")),
        ("global: an email both a trailing slot and in the text: the text's, first place",
         call(GLOBAL, "no, use Ada@Example.com", [("email", "OLD@Example.org"),
                                                  ("nickname", "Ada")])),
        ("global: an email without @, none in the text: None",
         call(GLOBAL, "nope", [("email", "nope")])),
        ("global: a slot without a validator (nickname) kept",
         call(GLOBAL, "call me Bo", [("nickname", "Bo")])),
        ("global: a trailing form slot (cuisine) dropped",
         call(GLOBAL, "thai, 5551234567", [("cuisine", "thai"), ("phone", "5551234567")])),
        ("global: requested_slot trailing (mapped to the forms) dropped",
         call(GLOBAL, "hi", [("requested_slot", "phone")])),
        ("global: no trailing slot events", call(GLOBAL, "hello")),
        ("global: a slot event before another event is not validated",
         call(GLOBAL, "call me Bo", [("nickname", "Bo")],
              after_user=[slot_event("phone", "12", 1_700_000_099.0), FEATURIZATION])),
        ("global: the same slot twice in the trailing run: last value, first place",
         call(GLOBAL, "555 123 4567", [("phone", "555"), ("nickname", "Bo"),
                                      ("phone", "555 123 4567")])),
        ("global: three slots, in their order, one rejected",
         call(GLOBAL, "x", [("nickname", "Bo"), ("email", "X@Y.Z"), ("phone", "12")])),
        ("global: a domain without slots: nothing validated nor extracted",
         call(GLOBAL, "a@b.c", [("phone", "5551234567")], domain=domain_with(slots=None))),
        ("global: a condition without active_loop keeps a slot global",
         call(GLOBAL, "5551234", [("phone", "5551234")], domain=domain_with(slots={
             **SLOTS, "phone": slot("text", mapping("from_text", None))}))),
        ("global: one mapping with an active_loop condition makes a slot a form's",
         call(GLOBAL, "A@B.com", [("email", "A@B.com")], domain=domain_with(slots={
             **SLOTS, "email": slot("text", mapping("custom"),
                                    mapping("from_text", "booking_form"))}))),
        # validate_restaurant_form: cuisine, num_people, outdoor_seating.
        ("restaurant: cuisine Thai", call(RESTAURANT, "Thai", [("cuisine", "Thai")], **r)),
        ("restaurant: cuisine pizza: utter_wrong_cuisine and None",
         call(RESTAURANT, "pizza", [("cuisine", "pizza")], **r)),
        ("restaurant: num_people \"4\"", call(RESTAURANT, "4", [("num_people", "4")], **r)),
        ("restaurant: num_people 4", call(RESTAURANT, "4", [("num_people", 4)], **r)),
        ("restaurant: num_people \"04\"", call(RESTAURANT, "04", [("num_people", "04")], **r)),
        ("restaurant: num_people \"0\": rejected", call(RESTAURANT, "0", [("num_people", "0")], **r)),
        ("restaurant: num_people \"four\": rejected",
         call(RESTAURANT, "four", [("num_people", "four")], **r)),
        ("restaurant: num_people 2.5: rejected", call(RESTAURANT, "2.5", [("num_people", 2.5)], **r)),
        ("restaurant: num_people 4.0 (a float): rejected",
         call(RESTAURANT, "4", [("num_people", 4.0)], **r)),
        ("restaurant: num_people true (a bool): rejected",
         call(RESTAURANT, "yes", [("num_people", True)], **r)),
        ("restaurant: num_people -3: rejected", call(RESTAURANT, "-3", [("num_people", -3)], **r)),
        ("restaurant: num_people \"\u0664\" (a non-ASCII digit): rejected",
         call(RESTAURANT, "\u0664", [("num_people", "\u0664")], **r)),
        ("restaurant: requested outdoor_seating, \"outside please\": true",
         call(RESTAURANT, "outside please", **seating)),
        ("restaurant: requested outdoor_seating, \"inside\": false",
         call(RESTAURANT, "Inside", **seating)),
        ("restaurant: requested outdoor_seating, \"whatever\": nothing",
         call(RESTAURANT, "whatever", **seating)),
        ("restaurant: the text's seating over a trailing candidate",
         call(RESTAURANT, "outside", [("outdoor_seating", False)], **seating)),
        ("restaurant: requested cuisine, \"outside\": nothing extracted",
         call(RESTAURANT, "outside", loop="restaurant_form",
              before=[("requested_slot", "cuisine")])),
        ("restaurant: three slots at once, one extracted",
         call(RESTAURANT, "Italian for 2, outside", [("cuisine", "Italian"),
                                                     ("num_people", "2")], **seating)),
        ("restaurant: two rejected: two messages in order",
         call(RESTAURANT, "pizza for four", [("cuisine", "pizza"), ("num_people", "four")], **r)),
        ("restaurant: a trailing slot not required (phone) dropped",
         call(RESTAURANT, "thai", [("phone", "5551234567"), ("cuisine", "thai")], **r)),
        ("restaurant: requested_slot trailing dropped",
         call(RESTAURANT, "3", [("requested_slot", "num_people"), ("num_people", "3")], **r)),
        ("restaurant: the form missing from the domain's forms: all dropped",
         call(RESTAURANT, "thai outside", [("cuisine", "thai")], **seating,
              domain=domain_with(forms={"booking_form": FORMS["booking_form"]}))),
        # validate_booking_form: vegetarian required when the cuisine is indian.
        ("booking: cuisine Indian: requested_slot num_people",
         call(BOOKING, "Indian", [("cuisine", "Indian")], **b)),
        ("booking: cuisine thai: no requested_slot event",
         call(BOOKING, "thai", [("cuisine", "thai")], **b)),
        ("booking: cuisine mexican: utter_wrong_cuisine, no requested_slot",
         call(BOOKING, "mexican", [("cuisine", "mexican")], **b)),
        ("booking: vegetarian \"Yes\", all filled: requested_slot None",
         call(BOOKING, "Yes", [("vegetarian", "Yes")], before=INDIAN_FOR_TWO, **b)),
        ("booking: vegetarian true, all filled: requested_slot None",
         call(BOOKING, "sure", [("vegetarian", True)], before=INDIAN_FOR_TWO, intent="affirm",
              **b)),
        ("booking: vegetarian \"maybe\": None, requested_slot vegetarian",
         call(BOOKING, "maybe", [("vegetarian", "maybe")], before=INDIAN_FOR_TWO, **b)),
        ("booking: all filled, no trailing slots: requested_slot None",
         call(BOOKING, "ok", before=INDIAN_FOR_TWO + (("vegetarian", False),), **b)),
        ("booking: vegetarian \"no\" when thai: not required, dropped",
         call(BOOKING, "no", [("vegetarian", "no")], before=[("cuisine", "thai")], **b)),
        ("booking: Indian and vegetarian together: required read before validation",
         call(BOOKING, "Indian, no", [("cuisine", "Indian"), ("vegetarian", "no")], **b)),
        ("booking: indian and vegetarian together, already lower case",
         call(BOOKING, "indian, NO", [("cuisine", "indian"), ("vegetarian", "NO")], **b)),
        ("booking: the form missing from the domain's forms, indian: only vegetarian required",
         call(BOOKING, "2", [("num_people", "2")], before=[("cuisine", "indian")], **b,
              domain=domain_with(forms={"restaurant_form": FORMS["restaurant_form"]}))),
        # The protocol around them.
        ("an unknown action: 404", call("action_no_such_thing", "hi", [("phone", "5551234567")])),
        ("no domain for a validation action: 449",
         call(RESTAURANT, "thai", [("cuisine", "thai")], domain=NO_DOMAIN, **r)),
        ("domain null for a validation action: 449",
         call(GLOBAL, "5551234567", [("phone", "5551234567")], domain=None)),
        ("domain {}: the last domain sent is used",
         call(GLOBAL, "5551234567", [("phone", "5551234567")], domain={})),
        ("no next action: 200 and null", call("", "hi")),
    ]


# Deliberate differences: name -> (body, why). None so far.
DELIBERATE = {}


def post(port, body):
    """(status, the JSON body parsed keeping key order) of one POST /webhook."""
    request = urllib.request.Request(
        f"http://127.0.0.1:{port}/webhook", data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"}, method="POST")
    try:
        with urllib.request.urlopen(request, timeout=10) as answer:
            status, raw = answer.status, answer.read()
    except urllib.error.HTTPError as e:
        status, raw = e.code, e.read()
    except (urllib.error.URLError, OSError) as e:
        return "no answer", str(e)
    try:
        return status, json.loads(raw)
    except ValueError:
        return status, raw.decode(errors="replace")


def canonical(answer):
    """The answer as text that tells 1 from 1.0 from true and ignores key order."""
    return json.dumps(answer, sort_keys=True, ensure_ascii=False)


def main():
    sdk_port, ours_port = sys.argv[1], sys.argv[2]
    failed, reordered = 0, 0
    all_cases = cases()
    for name, body in all_cases:
        a, b = post(sdk_port, body), post(ours_port, body)
        same = canonical(a) == canonical(b)
        print(f"{'ok' if same else 'DIFF'}: {name}: {a[0]}")
        if not same:
            failed += 1
            print(f"  rasa-sdk:   {json.dumps(a, ensure_ascii=False)}")
            print(f"  actiongate: {json.dumps(b, ensure_ascii=False)}")
        elif json.dumps(a) != json.dumps(b):
            reordered += 1
            print("  (the same but for the order of keys)")
            print(f"  rasa-sdk:   {json.dumps(a, ensure_ascii=False)}")
            print(f"  actiongate: {json.dumps(b, ensure_ascii=False)}")
    for name, (body, why) in DELIBERATE.items():
        a, b = post(sdk_port, body), post(ours_port, body)
        print(f"deliberate: {name}: rasa-sdk {a[0]}, actiongate {b[0]} ({why})")
        if canonical(a) == canonical(b):
            print("  (they agree now: update the list)")
    print(f"{len(all_cases) - failed} of {len(all_cases)} cases the same"
          + (f", {reordered} with keys in another order" if reordered else ""))
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
