"""The benchmark's action for rasa-sdk: the same `count_events` as crates/actionserver/examples/bench_server.rs.

Start with: python -m rasa_sdk --actions bench.rasa_sdk_actions -p PORT (from the repo root).
"""

from typing import Any, Dict, List, Text

from rasa_sdk import Action, Tracker
from rasa_sdk.events import SlotSet
from rasa_sdk.executor import CollectingDispatcher


class CountEvents(Action):
    def name(self) -> Text:
        return "count_events"

    def run(
        self, dispatcher: CollectingDispatcher, tracker: Tracker, domain: Dict[Text, Any]
    ) -> List[Dict[Text, Any]]:
        return [SlotSet("event_count", len(tracker.events))]
