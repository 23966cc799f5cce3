"""The validation conformance suite's actions for rasa-sdk: the same
`action_validate_slot_mappings`, `validate_restaurant_form` and `validate_booking_form` as
crates/actionserver/examples/validation.rs.

Start with: python -m rasa_sdk --actions tests.validation.actions -p PORT
(from the repo root).
"""

from typing import Any, Dict, List, Text

from rasa_sdk import FormValidationAction, Tracker, ValidationAction
from rasa_sdk.executor import CollectingDispatcher
from rasa_sdk.types import DomainDict

CUISINES = ["thai", "indian", "italian"]


def _cuisine(value: Any, dispatcher: CollectingDispatcher) -> Dict[Text, Any]:
    if isinstance(value, str) and value.lower() in CUISINES:
        return {"cuisine": value.lower()}
    dispatcher.utter_message(response="utter_wrong_cuisine")
    return {"cuisine": None}


class ValidateSlotMappings(ValidationAction):
    """The global slots: `phone` and `email` validated, `email` also read from the text;
    `nickname` has no validator."""

    def extract_email(
        self, dispatcher: CollectingDispatcher, tracker: Tracker, domain: DomainDict
    ) -> Dict[Text, Any]:
        text = tracker.latest_message.get("text") or ""
        for token in text.split():
            if "@" in token:
                return {"email": token}
        return {}

    def validate_phone(
        self, value: Any, dispatcher: CollectingDispatcher, tracker: Tracker,
        domain: DomainDict,
    ) -> Dict[Text, Any]:
        digits = "".join(c for c in str(value) if c.isdigit())
        if len(digits) >= 7:
            return {"phone": digits}
        dispatcher.utter_message(text="That phone number looks too short.")
        return {"phone": None}

    def validate_email(
        self, value: Any, dispatcher: CollectingDispatcher, tracker: Tracker,
        domain: DomainDict,
    ) -> Dict[Text, Any]:
        if isinstance(value, str) and "@" in value:
            return {"email": value.lower()}
        return {"email": None}


class ValidateRestaurantForm(FormValidationAction):
    """`restaurant_form`: cuisine, number of people, and seating read from the words."""

    def name(self) -> Text:
        return "validate_restaurant_form"

    def validate_cuisine(
        self, value: Any, dispatcher: CollectingDispatcher, tracker: Tracker,
        domain: DomainDict,
    ) -> Dict[Text, Any]:
        return _cuisine(value, dispatcher)

    def validate_num_people(
        self, value: Any, dispatcher: CollectingDispatcher, tracker: Tracker,
        domain: DomainDict,
    ) -> Dict[Text, Any]:
        n = None
        if isinstance(value, int) and not isinstance(value, bool):
            n = value
        elif isinstance(value, str) and value.isdigit() and value.isascii():
            n = int(value)
        if isinstance(n, int) and n > 0:
            return {"num_people": n}
        dispatcher.utter_message(text="How many people, as a number?")
        return {"num_people": None}

    def extract_outdoor_seating(
        self, dispatcher: CollectingDispatcher, tracker: Tracker, domain: DomainDict
    ) -> Dict[Text, Any]:
        if tracker.get_slot("requested_slot") != "outdoor_seating":
            return {}
        text = (tracker.latest_message.get("text") or "").lower()
        if "outside" in text:
            return {"outdoor_seating": True}
        if "inside" in text:
            return {"outdoor_seating": False}
        return {}


class ValidateBookingForm(FormValidationAction):
    """`booking_form`: asks whether vegetarian is fine when the cuisine is Indian."""

    def name(self) -> Text:
        return "validate_booking_form"

    async def required_slots(
        self, domain_slots: List[Text], dispatcher: CollectingDispatcher,
        tracker: Tracker, domain: DomainDict,
    ) -> List[Text]:
        if tracker.get_slot("cuisine") == "indian":
            return domain_slots + ["vegetarian"]
        return list(domain_slots)

    def validate_vegetarian(
        self, value: Any, dispatcher: CollectingDispatcher, tracker: Tracker,
        domain: DomainDict,
    ) -> Dict[Text, Any]:
        if isinstance(value, bool):
            return {"vegetarian": value}
        if isinstance(value, str) and value.lower() in ("yes", "no"):
            return {"vegetarian": value.lower() == "yes"}
        return {"vegetarian": None}

    def validate_cuisine(
        self, value: Any, dispatcher: CollectingDispatcher, tracker: Tracker,
        domain: DomainDict,
    ) -> Dict[Text, Any]:
        return _cuisine(value, dispatcher)
