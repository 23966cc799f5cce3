"""The benchmark's and the gRPC conformance suite's actions for rasa-sdk: the same
`count_events`, `read_domain` and `rejects` as crates/actionserver/examples/bench_server.rs.

Start with: python -m rasa_sdk --actions bench.rasa_sdk_actions -p PORT [--grpc]
(from the repo root).
"""

from typing import Any, Dict, List, Text

from rasa_sdk import Action, Tracker
from rasa_sdk.events import SlotSet
from rasa_sdk.interfaces import ActionExecutionRejection
from rasa_sdk.executor import CollectingDispatcher


class CountEvents(Action):
    def name(self) -> Text:
        return "count_events"

    def run(
        self, dispatcher: CollectingDispatcher, tracker: Tracker, domain: Dict[Text, Any]
    ) -> List[Dict[Text, Any]]:
        return [SlotSet("event_count", len(tracker.events))]


class ReadDomain(Action):
    def name(self) -> Text:
        return "read_domain"

    def run(
        self, dispatcher: CollectingDispatcher, tracker: Tracker, domain: Dict[Text, Any]
    ) -> List[Dict[Text, Any]]:
        names = sorted((domain or {}).get("responses", {}).keys())
        dispatcher.utter_message(text=",".join(names))
        return [SlotSet("responses", len(names))]


class Rejects(Action):
    def name(self) -> Text:
        return "rejects"

    def run(
        self, dispatcher: CollectingDispatcher, tracker: Tracker, domain: Dict[Text, Any]
    ) -> List[Dict[Text, Any]]:
        raise ActionExecutionRejection("rejects", "not today")
