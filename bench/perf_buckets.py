#!/usr/bin/env python3
"""Where a process's CPU went, by part of the new-change path: reads `perf script` output
(samples with call stacks, `perf record --call-graph dwarf`) and puts each sample in the
first bucket, in the order below, any frame of its stack matches.

Usage: perf_buckets.py SCRIPT_TXT [MICROSECONDS_PER_CHANGE]
Prints each bucket's share, and its share of MICROSECONDS_PER_CHANGE when given.
"""
import collections
import re
import sys

BUCKETS = [
    ("audit writer (batched, off the request)", r"write_audit"),
    ("store: SQLite statements and commits", r"^sqlite3_step$|sqlite3_prepare|rusqlite::|actiongate::store::db"),
    ("calls to the service (client, its sockets)", r"ServiceClient|hyper::|reqwest::|hyper_util"),
    # The body walked and kept raw (scan, request, tracker), and the events' fields parsed
    # wherever they are read (the guard parses them lazily).
    ("reading the request's JSON", r"WebhookRequest.*deserialize|deserialize.*WebhookRequest|RawEvent|Tracker|actionserver::protocol::(scan|request|tracker)::|change_floor::(Request|Slots)"),
    ("writing the answer's JSON", r"serde_json::ser|to_vec|to_string|Serialize"),
    ("the guard and the actions", r"actiongate::(consent|actions|conversation)|actionserver::(action|protocol)"),
    ("inbound HTTP (actix, middleware, its sockets)", r"actix_http::h1|actionserver::server|actix_web|actix_server"),
    ("the runtime (tasks, epoll, wake-ups)", r"tokio::runtime|epoll|mio::|futex|schedule"),
]


def samples(path):
    current = []
    with open(path, errors="replace") as lines:
        for line in lines:
            if not line.strip():
                if current:
                    yield current
                current = []
            elif line[0] not in " \t":
                current = []
            else:
                frame = re.sub(r"^[0-9a-f]+ ", "", line.strip()).rsplit(" (", 1)[0]
                current.append(re.sub(r"\+0x[0-9a-f]+$", "", frame))
    if current:
        yield current


def main():
    per_change = float(sys.argv[2]) if len(sys.argv) > 2 else None
    counts = collections.Counter()
    total = 0
    for stack in samples(sys.argv[1]):
        total += 1
        for name, pattern in BUCKETS:
            if any(re.search(pattern, f) for f in stack):
                counts[name] += 1
                break
        else:
            counts["other"] += 1
    print(f"{total} samples")
    for name, n in counts.most_common():
        share = n / max(total, 1)
        micros = f" {share * per_change:6.0f} µs" if per_change else ""
        print(f"{100 * share:5.1f} %{micros}  {name}")


if __name__ == "__main__":
    main()
