"""The gRPC conformance suite: the same requests to rasa-sdk 3.21.1 (`python -m rasa_sdk
--grpc`) and to actiongate's SDK (crates/actionserver/examples/bench_server.rs --grpc),
both serving the same actions (bench/rasa_sdk_actions), through the client rasa-sdk ships
(rasa_sdk.grpc_py, grpcio, gzip as Rasa Pro's channel has it). Compares status codes,
details and payloads; prints one line a case and exits non-zero on any difference not
listed as deliberate.

Usage: python tests/grpc/conformance.py RASA_SDK_PORT ACTIONGATE_PORT
"""

import json
import sys

import grpc
from google.protobuf.json_format import MessageToDict, ParseDict
from grpc_health.v1 import health_pb2, health_pb2_grpc
from rasa_sdk.grpc_py import action_webhook_pb2 as pb
from rasa_sdk.grpc_py import action_webhook_pb2_grpc as rpc

EVENTS = [{"event": "action", "name": "action_session_start", "timestamp": 1.0},
          {"event": "session_started", "timestamp": 1.5},
          {"event": "action", "name": "action_listen", "timestamp": 2.0},
          {"event": "user", "text": "hello", "timestamp": 2.5,
           "parse_data": {"intent": {"name": "greet", "confidence": 1.0}, "entities": []}},
          {"event": "bot", "text": "Hi!", "timestamp": 3.0, "data": {}, "metadata": {}}]
DOMAIN = {"intents": [{"string_value": "greet"}, {"string_value": "affirm"}],
          "responses": {"utter_greet": [{"text": "Hi!"}], "utter_bye": [{"text": "Bye"}]},
          "slots": {"event_count": {"type": "any"}}}


def request(action, domain=True, digest=None, events=EVENTS):
    body = {"next_action": action, "sender_id": "conformance", "version": "3.21.0",
            "tracker": {"sender_id": "conformance", "slots": {"event_count": None},
                        "latest_message": {"text": "hello"}, "events": events,
                        "paused": False, "latest_action_name": "action_listen"}}
    if domain:
        body["domain"] = DOMAIN
    if digest is not None:
        body["domain_digest"] = digest
    return ParseDict(body, pb.WebhookRequest(), ignore_unknown_fields=True)


def stub(port):
    channel = grpc.insecure_channel(f"127.0.0.1:{port}", compression=grpc.Compression.Gzip)
    return channel, rpc.ActionServiceStub(channel)


def outcome(call):
    """(code, details as JSON when it is JSON, payload) of one call."""
    try:
        answer = call()
    except grpc.RpcError as e:
        details = e.details()
        try:
            details = json.loads(details)
        except (TypeError, ValueError):
            pass
        return e.code().name, details, getattr(e, "events_before", None)
    if isinstance(answer, list):
        return "OK", None, [a if isinstance(a, str) else
                            MessageToDict(a, preserving_proto_field_name=True) for a in answer]
    return "OK", None, MessageToDict(answer, preserving_proto_field_name=True)


def stream(s, req):
    """Every event of a WebhookStream; an error status after them is raised with them."""
    events = []
    try:
        for event in s.WebhookStream(req):
            events.append(event)
    except grpc.RpcError as e:
        e.events_before = [MessageToDict(x, preserving_proto_field_name=True) for x in events]
        raise
    return events


def cases():
    return [
        ("count_events, 5 events and the domain", lambda s: s.Webhook(request("count_events"))),
        ("count_events, 1,000 events",
         lambda s: s.Webhook(request("count_events", events=EVENTS * 200))),
        ("no next action: an empty answer", lambda s: s.Webhook(request(""))),
        ("an unknown action: NOT_FOUND / ACTION",
         lambda s: s.Webhook(request("no_such_action"))),
        ("a rejection: INTERNAL with action_name and message",
         lambda s: s.Webhook(request("rejects"))),
        ("read_domain, an unknown digest and no domain: NOT_FOUND / DOMAIN",
         lambda s: s.Webhook(request("read_domain", domain=False, digest="d-unknown"))),
        ("read_domain with the domain and its digest",
         lambda s: s.Webhook(request("read_domain", digest="d1"))),
        ("read_domain, the digest alone once the domain was sent",
         lambda s: s.Webhook(request("read_domain", domain=False, digest="d1"))),
        ("WebhookStream: the final result", lambda s: stream(s, request("count_events"))),
        ("WebhookStream, an unknown action: an error event, then NOT_FOUND",
         lambda s: stream(s, request("no_such_action"))),
        ("AckStreamChunks: succeeds", lambda s: s.AckStreamChunks(pb.StreamChunkAck(response_id="x"))),
        ("Actions: the same names", lambda s: sorted(
            (a["name"] for a in MessageToDict(s.Actions(pb.ActionsRequest()))["actions"]))),
    ]


# Deliberate differences (CONTRACT.md section 0): actiongate asks for the domain only for
# actions that read it; rasa-sdk asks for it before running any action.
DELIBERATE = {
    "count_events without a domain or a digest": (
        lambda s: s.Webhook(request("count_events", domain=False)),
        "rasa-sdk answers NOT_FOUND / DOMAIN; actiongate runs the action (it reads no domain)",
    ),
}


def health(port):
    channel = grpc.insecure_channel(f"127.0.0.1:{port}")
    answer = health_pb2_grpc.HealthStub(channel).Check(
        health_pb2.HealthCheckRequest(service="ActionServer"))
    return health_pb2.HealthCheckResponse.ServingStatus.Name(answer.status)


def main():
    sdk_port, ours_port = sys.argv[1], sys.argv[2]
    (_, sdk), (_, ours) = stub(sdk_port), stub(ours_port)
    failed, unhealthy = 0, 0
    for name, call in cases():
        a = outcome(lambda: call(sdk))
        b = outcome(lambda: call(ours))
        same = a == b
        print(f"{'same' if same else 'DIFFERENT'}: {name}: {a[0]}")
        if not same:
            failed += 1
            print(f"  rasa-sdk:   {a}")
            print(f"  actiongate: {b}")
    for name, (call, why) in DELIBERATE.items():
        a, b = outcome(lambda: call(sdk)), outcome(lambda: call(ours))
        print(f"deliberate: {name}: rasa-sdk {a[0]}, actiongate {b[0]} ({why})")
        if a == b:
            print("  (they agree now: update the list)")
    for port, who in [(sdk_port, "rasa-sdk"), (ours_port, "actiongate")]:
        status = health(port)
        print(f"health of ActionServer at {who}: {status}")
        if status != "SERVING":
            unhealthy += 1
    print(f"{len(cases()) - failed} of {len(cases())} cases the same")
    sys.exit(1 if failed or unhealthy else 0)


if __name__ == "__main__":
    main()
