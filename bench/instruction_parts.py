#!/usr/bin/env python3
"""The parts of a new change in actiongate, from `callgrind_annotate --inclusive=yes`
output on stdin: each part's inclusive instructions divided by the changes counted. Only
plain functions are parts: an async function's inclusive count in callgrind depends on
how its polls nest, and is not a cost to read.

Usage: callgrind_annotate --inclusive=yes FILE | instruction_parts.py CHANGES
Prints a Markdown table, largest part first.
"""
import re
import sys

# (part, the function whose inclusive count it is), matched against callgrind's names.
PARTS = [
    ("the whole change", r"^PROGRAM TOTALS"),
    ("reading the request (the JSON walked, events kept raw, slots read)",
     r"actionserver::protocol::request::WebhookRequest::parse \["),
    ("the guard's reading of the tracker (ApplyInputs::from_tracker)",
     r"ApplyInputs::from_tracker \["),
    ("the events' fields read (RawEvent::fields, through the guard's book)",
     r"actiongate::conversation::Fieldbook::fields \["),
    ("the customer's identity (session_identity, in select and apply)",
     r"actiongate::conversation::session_identity \["),
    ("the conversation checks: reply words, request key (check_conversation)",
     r"actiongate::consent::checks::check_conversation \["),
    ("SQLite statements (sqlite3_step)", r"^\S*sqlite3_step \["),
    ("SQLite checkpoints (their own thread)", r"^\S*walCheckpoint \["),
    ("writing the answers' JSON", r"Serialize for actionserver::protocol::message::ActionResponse>::serialize( \[|$)"),
]


def main():
    changes = float(sys.argv[1])
    found = {}
    for line in sys.stdin:
        m = re.match(r"\s*([\d,]+) \(\s*[\d.]+%\)\s+(\S.*)", line)
        if not m or "=>" in m.group(2):
            continue
        name = re.sub(r"^\S+?:(?=\S)", "", m.group(2), count=1)
        for part, pattern in PARTS:
            if re.search(pattern, name):
                count = int(m.group(1).replace(",", "")) / changes
                found[part] = max(found.get(part, 0), count)
    print("| part | instructions per change |")
    print("|---|---:|")
    for part, _ in PARTS:
        if part in found:
            print(f"| {part} | {found[part]:,.0f} |")


if __name__ == "__main__":
    main()
