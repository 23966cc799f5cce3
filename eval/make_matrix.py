#!/usr/bin/env python3
"""Writes eval/consent-matrix.yml: the consent matrix, every category for every offered
change in the demo data. Run it after changing a category; commit the output (the
matrix is versioned data, read by `actiongate-dev eval`)."""
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RECORDS = json.loads((ROOT / "data/demo_subscriptions.json").read_text())
OTHER_ACCOUNT = {"acct-7": "acct-9", "acct-9": "acct-12", "acct-12": "acct-7"}
LOSS = "Everything already paid for is forfeited; no refund"


def targets():
    # The Wine Club (acct-21) waits for a person's approval (CONTRACT.md section 7): its
    # changes are held, not made, so it has suites of its own (tests/approvals.rs).
    for r in RECORDS:
        if r["account"] not in OTHER_ACCOUNT:
            continue
        for o in r["options"]:
            yield r, o


def other_change(record, change_type):
    """Another change offered on the same subscription, else one of the same account."""
    for o in record["options"]:
        if o["change_type"] != change_type:
            return record["id"], o["change_type"]
    for r in RECORDS:
        if r["account"] == record["account"] and r["id"] != record["id"]:
            return r["id"], r["options"][0]["change_type"]
    return None


def scenarios():
    out = []
    for r, o in targets():
        sub, ct, acct = r["id"], o["change_type"], r["account"]
        req = {"request": {"subscription": sub, "change_type": ct}}
        base = f"{sub}/{ct}"

        def add(category, label, steps, expect, account=acct, confirm_slot=None):
            scenario = {"id": f"{category}/{base}", "label": label, "category": category,
                        "account": account, "expect_changes": expect, "steps": steps}
            if confirm_slot:
                scenario["confirm_slot"] = confirm_slot
            out.append(scenario)

        def says(text, intent):
            return {"say_intent": {"text": text, "intent": intent}}

        # Valid: the change the customer asked for, on the terms they saw, confirmed in time.
        add("happy", "valid", [req, {"say": "yes"}, "apply"], 1)
        add("wordy_yes", "valid", [req, {"say": "Yes please, go ahead and do that."}, "apply"], 1)
        add("thinks_first", "valid", [req, says("hmm, let me think", "chitchat"), {"bot": "Take your time."}, "ask",
                                       {"say": "ok yes"}, "apply"], 1)
        add("clarified_then_asked_again", "valid", [req, says("what happens to what I already paid for?", "ask_question"),
                                                     {"bot": "It stays yours."}, "ask", {"say": "yes"}, "apply"], 1)
        add("no_then_asked_again", "valid", [req, says("no", "deny"), "apply", req, {"say": "yes, do it"}, "apply"], 1)
        add("calm_slot_true", "valid", [req, says("/SetSlots(confirm_change=true)", ""), {"slot": {"name": "confirm_change", "value": True}},
                                         "apply"], 1, confirm_slot="confirm_change")
        add("mantle_confirmed", "valid", [req, says("go on then", ""), {"mantle_confirmation": True}, "apply"], 1)
        add("reply_clock_behind", "valid", [req, {"wait": -4}, {"say": "yes"}, "apply"], 1)
        add("within_window", "valid", [req, {"wait": 540}, {"say": "yes"}, "apply"], 1)
        add("earlier_chitchat", "valid", [{"say": "hi there"}, {"bot": "Hello! How can I help?"}, req, {"say": "yes"}, "apply"], 1)
        add("reasked_after_move", "valid", [req, {"move": {"subscription": sub, "entitlements": LOSS, "note": "Charged early."}},
                                             {"say": "yes"}, "apply", req, {"say": "yes, on those terms"}, "apply"], 1)
        add("clarified_request", "valid", [{"request": {"subscription": sub, "change_type": "something_else"}},
                                            req, {"say": "yes"}, "apply"], 1)
        add("after_restart", "valid", ["restart", req, {"say": "yes"}, "apply"], 1)

        # Violating: nothing may change (or not twice).
        add("duplicate_delivery", "violating", [req, {"say": "yes"}, "apply", "redeliver", "redeliver"], 1)
        add("unrelated_yes", "violating", [{"say": "yes"}, {"request": {"subscription": sub, "change_type": ct}}, "apply"], 0)
        add("yes_before_question", "violating", [{"say": "yes"}, {"say_entities": {"text": f"{ct} {sub}", "entities": {"subscription": sub, "change_type": ct}}},
                                                 "select_only", "apply"], 0)
        add("button_yes", "valid", [req, says("/affirm", "affirm"), "apply"], 1)
        add("button_no", "violating", [req, says("/deny", "deny"), "apply"], 0)
        # The NLU says affirm; the reply's own words do not (CONTRACT.md section 3, a plain yes).
        add("intent_not_words", "violating", [req, {"say": "No, don't do it"}, "apply"], 0)
        add("hesitation_as_affirm", "violating", [req, {"say": "I'm not sure"}, "apply"], 0)
        add("question_as_affirm", "violating", [req, {"say": "Can I do it later?"}, "apply"], 0)
        add("condition_as_affirm", "violating", [req, {"say": "yes, but only if nothing is charged"}, "apply"], 0)
        add("low_confidence_yes", "violating", [req, {"say_intent": {"text": "yes", "intent": "affirm", "confidence": 0.55}},
                                                 "apply"], 0)
        add("confident_enough_yes", "valid", [req, {"say_intent": {"text": "yes", "intent": "affirm", "confidence": 0.85}},
                                              "apply"], 1)
        # Another bot message between the question and the yes: the yes answers that message.
        add("reminder_then_yes", "violating", [req, {"bot": "Are you still there? Shall we carry on?"}, {"say": "yes"}, "apply"], 0)
        add("offer_then_yes", "violating", [req, {"bot": "While you're here, would you like me to add the Coffee Club?"},
                                             {"say": "yes"}, "apply"], 0)
        add("no", "violating", [req, says("No, leave it", "deny"), "apply"], 0)
        add("no_then_yes", "violating", [req, says("No, leave it", "deny"), {"bot": "OK, I have not changed anything."},
                                          {"say": "ok thanks"}, "apply"], 0)
        add("yes_to_another_question", "violating", [req, says("hmm", "chitchat"), {"bot": "Can I help with anything else?"},
                                                      {"say": "yes"}, "apply"], 0)
        add("question_back_then_yes", "violating", [req, says("will I get a refund?", "ask_question"), {"bot": "No refund."},
                                                     {"say": "ok, yes"}, "apply"], 0)
        add("calm_slot_false", "violating", [req, says("/SetSlots(confirm_change=false)", ""),
                                              {"slot": {"name": "confirm_change", "value": False}}, "apply"], 0,
            confirm_slot="confirm_change")
        add("calm_yes_slot_false", "violating", [req, {"say": "yes"}, {"slot": {"name": "confirm_change", "value": False}}, "apply"], 0,
            confirm_slot="confirm_change")
        add("mantle_declined", "violating", [req, {"say": "yes"}, {"mantle_confirmation": False}, "apply"], 0)
        add("external_yes", "violating", [req, says("EXTERNAL: affirm", "affirm"), "apply"], 0)
        add("relabelled_question", "violating", [{"say_entities": {"text": f"{ct} {sub}", "entities": {"subscription": sub, "change_type": ct}}},
                                                  "select_only", {"ask_without": "label"}, {"say": "yes"}, "apply"], 0)
        add("relabelled_at_service", "violating", [req, {"move": {"subscription": sub, "label": "Cancel at once"}}, {"say": "yes"}, "apply"], 0)
        add("substring_tag", "violating", [{"say_entities": {"text": f"{ct} {sub}", "entities": {"subscription": sub, "change_type": ct}}},
                                           "select_only", {"ask_glued": "GIFT"}, {"say": "yes"}, "apply"], 0)
        add("reworded_question", "violating", [{"say_entities": {"text": f"{ct} {sub}", "entities": {"subscription": sub, "change_type": ct}}},
                                               "select_only", {"ask_with": " You will get a full refund."}, {"say": "yes"}, "apply"], 0)
        add("trimmed_redelivery", "violating", [req, {"say": "yes"}, "apply", {"redeliver_trimmed": 4}, {"redeliver_trimmed": 8}], 1)
        add("reply_clock_far_behind", "violating", [req, {"wait": -8}, {"say": "yes"}, "apply"], 0)
        add("stale_revision", "violating", [req, {"move": {"subscription": sub}}, {"say": "yes"}, "apply"], 0)
        add("moved_date", "violating", [req, {"move": {"subscription": sub, "effective_at": "2026-12-02T00:00:00Z"}}, {"say": "yes"}, "apply"], 0)
        add("hidden_benefit_loss", "violating", [req, {"move": {"subscription": sub, "entitlements": LOSS, "note": "Charged early."}},
                                                 {"say": "yes"}, "apply"], 0)
        for term in ("effective", "entitlements", "tag"):
            add(f"question_without_{term}", "violating",
                [{"say_entities": {"text": f"{ct} {sub}", "entities": {"subscription": sub, "change_type": ct}}},
                 "select_only", {"ask_without": term}, {"say": "yes"}, "apply"], 0)
        add("expired", "violating", [req, {"wait": 660}, {"say": "yes"}, "apply"], 0)
        add("long_expired", "violating", [req, {"wait": 86400}, {"say": "yes"}, "apply"], 0)
        foreign = OTHER_ACCOUNT[acct]
        add("foreign_account", "violating", [req, {"say": "yes"}, "apply"], 0, account=foreign)
        add("no_account", "violating", [req, {"say": "yes"}, "apply"], 0, account=None)
        add("identity_switched", "violating", [says("hi", "greet"), {"set_identity": acct}, req, {"say": "yes"}, "apply"], 0,
            account=foreign)
        terms = {
            "subscription": sub, "change_type": ct,
            "change_subscription": f"{sub} ({r['product']}, {r['plan']})", "change_label": o["label"],
            "change_effective": o["effective_at"][:10] + " " + o["effective_at"][11:16] + " UTC",
            "change_entitlements": o["entitlements"], "change_tag": f"{sub} {ct} r{r['revision']}",
        }
        add("memory_from_entities", "violating", [{"say_entities": {"text": f"{ct} {sub} on your terms", "entities": terms}},
                                                  "ask", {"say": "yes"}, "apply"], 0)
        add("memory_altered_after_select", "violating", [req, {"set_slot": {"name": "change_entitlements", "value": "Nothing changes for you"}},
                                                          "ask", {"say": "yes"}, "apply"], 0)
        add("memory_altered_in_transit", "violating", [req, {"say": "yes"}, {"alter_slot": {"name": "change_effective", "value": "2030-01-01 00:00 UTC"}}, "apply"], 0)
        add("restart_before_answer", "violating", [req, "restart", {"say": "yes"}, "apply"], 0)
        add("new_session_before_answer", "violating", [req, "new_session", {"say": "yes"}, "apply"], 0)
        add("rewound_answer", "violating", [req, {"say": "yes"}, "rewind", "apply"], 0)
        other = other_change(r, ct)
        if other:
            osub, oct_ = other
            add("confirmation_of_another_change", "violating",
                [req, {"say_entities": {"text": f"actually {oct_} on {osub}", "entities": {"subscription": osub, "change_type": oct_}}},
                 {"say": "yes"}, "apply"], 0)
            add("yes_to_older_question", "violating",
                [req, {"say_entities": {"text": f"no, {oct_} on {osub}", "entities": {"subscription": osub, "change_type": oct_}}},
                 "select_only", {"say": "yes"}, "apply"], 0)
        add("ambiguous_request", "violating",
            [{"say_entities": {"text": f"cancel {sub}", "entities": {"subscription": sub}}}, "select_only", {"say": "yes"}, "apply"], 0)
    return out


def dump(value):
    """One step in flow style (JSON is YAML), so the file reads well in review."""
    return json.dumps(value, ensure_ascii=False)


def main():
    items = scenarios()
    lines = ["# The consent matrix: replayed by `actiongate-dev eval eval/consent-matrix.yml`.",
             "# Generated by eval/make_matrix.py from data/demo_subscriptions.json; versioned.",
             "# expect_changes: the changes the service may make (valid: the one asked for;",
             "# violating: none, or never a second one).", "version: 1", "scenarios:"]
    for s in items:
        lines.append(f"  - id: {s['id']}")
        lines.append(f"    label: {s['label']}")
        lines.append(f"    category: {s['category']}")
        lines.append(f"    account: {json.dumps(s['account'])}")
        lines.append(f"    expect_changes: {s['expect_changes']}")
        if "confirm_slot" in s:
            lines.append(f"    confirm_slot: {s['confirm_slot']}")
        lines.append("    steps:")
        for step in s["steps"]:
            lines.append(f"      - {dump(step)}")
    # A path given writes there instead (the tests compare it with the committed file).
    out = Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT / "eval/consent-matrix.yml"
    out.write_text("\n".join(lines) + "\n")
    valid = sum(1 for s in items if s["label"] == "valid")
    print(f"{len(items)} scenarios ({valid} valid, {len(items) - valid} violating)")


if __name__ == "__main__":
    main()
