"""Families about entering data: forms, logins and the common input widgets."""

from __future__ import annotations

import calendar
import datetime
import random

from rllm_envs.web.tasks import words
from rllm_envs.web.tasks.base import Family, Instance, Step, pick


def _person(rng: random.Random) -> tuple[str, str]:
    first, last = rng.choice(words.FIRST_NAMES), rng.choice(words.LAST_NAMES)
    return f"{first} {last}", f"{first.lower()}.{last.lower()}@example.org"


def contact_form(rng: random.Random) -> Instance:
    name, email = _person(rng)
    topic = rng.choice(words.TOPICS)
    message = f"Please send me the {topic.lower()} brochure, issue {rng.randint(1, 99)}."
    subjects = pick(rng, ("Sales", "Support", "Press", "Billing", "Careers", "Other"), 4)
    subject = rng.choice(subjects)
    return Instance(
        goal=(
            f'Send the contact form with name "{name}", email "{email}", subject "{subject}" and '
            f'message "{message}".'
        ),
        public={"subjects": subjects},
        expected={
            "state": {
                "submitted": {"name": name, "email": email, "subject": subject, "message": message}
            }
        },
        solution=(
            Step("fill", "textbox", "Name", name),
            Step("fill", "textbox", "Email", email),
            Step("select", "combobox", "Subject", subject),
            Step("fill", "textbox", "Message", message),
            Step("click", "button", "Send"),
        ),
    )


def login(rng: random.Random) -> Instance:
    users = [name.lower() + str(rng.randint(1, 99)) for name in pick(rng, words.FIRST_NAMES, 4)]
    accounts = {user: rng.choice(words.WORDS) + str(rng.randint(100, 999)) for user in users}
    user = rng.choice(users)
    return Instance(
        goal=f'Log in as "{user}" with the password "{accounts[user]}".',
        public={"accounts": accounts},
        expected={"state": {"logged_in": user}},
        solution=(
            Step("fill", "textbox", "Username", user),
            Step("fill", "textbox", "Password", accounts[user]),
            Step("click", "button", "Log in"),
        ),
    )


def checkboxes(rng: random.Random) -> Instance:
    options = pick(rng, words.FRUITS, 8)
    wanted = sorted(rng.sample(options, rng.randint(1, 4)))
    prechecked = sorted(rng.sample(options, rng.randint(0, 3)))
    toggles = [item for item in options if (item in wanted) != (item in prechecked)]
    return Instance(
        goal=f"Tick exactly these fruits and nothing else: {', '.join(wanted)}. Then submit.",
        public={"options": options, "checked": prechecked},
        expected={"state": {"checked": wanted}},
        solution=(
            *(Step("click", "checkbox", item) for item in toggles),
            Step("click", "button", "Submit"),
        ),
    )


def radio(rng: random.Random) -> Instance:
    options = pick(rng, words.CITIES, 5)
    choice = rng.choice(options)
    return Instance(
        goal=f'Choose "{choice}" as the destination of your trip and submit.',
        public={"options": options},
        expected={"state": {"destination": choice}},
        solution=(Step("click", "radio", choice), Step("click", "button", "Submit")),
    )


def dropdown(rng: random.Random) -> Instance:
    options = sorted(pick(rng, words.COUNTRIES, 12))
    choice = rng.choice(options)
    return Instance(
        goal=f'Set your country to "{choice}" and save.',
        public={"options": options},
        expected={"state": {"country": choice}},
        solution=(Step("select", "combobox", "Country", choice), Step("click", "button", "Save")),
    )


def slider(rng: random.Random) -> Instance:
    start, target = rng.randrange(0, 101, 5), rng.randrange(0, 101, 5)
    while target == start:
        target = rng.randrange(0, 101, 5)
    return Instance(
        goal=f"Set the volume to {target} and apply.",
        public={"start": start},
        expected={"state": {"volume": target}},
        solution=(Step("fill", "slider", "Volume", str(target)), Step("click", "button", "Apply")),
    )


def toggles(rng: random.Random) -> Instance:
    names = pick(rng, words.SETTINGS, 5)
    start = {name: rng.random() < 0.5 for name in names}
    wanted_on = sorted(rng.sample(names, rng.randint(1, 3)))
    target = {name: name in wanted_on for name in names}
    if target == start:  # the task must ask for a change
        target[names[0]] = not target[names[0]]
        wanted_on = sorted(name for name in names if target[name])
    return Instance(
        goal=(
            f"In the settings, turn on exactly these switches: {', '.join(wanted_on)} "
            "(turn every other switch off), then save."
        ),
        public={"settings": start},
        expected={"state": {"settings": target}},
        solution=(
            *(Step("click", "switch", name) for name in names if start[name] != target[name]),
            Step("click", "button", "Save settings"),
        ),
    )


def wizard(rng: random.Random) -> Instance:
    name, _ = _person(rng)
    plans = ["Basic", "Plus", "Pro", "Team"]
    plan = rng.choice(plans)
    seats = rng.randint(1, 20)
    return Instance(
        goal=f'Sign up "{name}" for the {plan} plan with {seats} seats and finish the sign-up.',
        public={"plans": plans},
        expected={"state": {"signup": {"name": name, "plan": plan, "seats": seats}}},
        solution=(
            Step("fill", "textbox", "Full name", name),
            Step("click", "button", "Next"),
            Step("click", "radio", plan),
            Step("fill", "spinbutton", "Seats", str(seats)),
            Step("click", "button", "Next"),
            Step("click", "checkbox", "I accept the terms"),
            Step("click", "button", "Finish"),
        ),
    )


def _day_label(day: datetime.date) -> str:
    return f"{day.day} {calendar.month_name[day.month]} {day.year}"


def date_picker(rng: random.Random) -> Instance:
    start = datetime.date(rng.randint(2025, 2028), rng.randint(1, 12), 1)
    months_ahead = rng.randint(0, 3)
    month_index = start.month - 1 + months_ahead
    year, month = start.year + month_index // 12, month_index % 12 + 1
    target = datetime.date(year, month, rng.randint(1, calendar.monthrange(year, month)[1]))
    return Instance(
        goal=f"Book the date {_day_label(target)} with the date picker and confirm it.",
        public={"year": start.year, "month": start.month},
        expected={"state": {"date": target.isoformat()}},
        solution=(
            Step("click", "button", "Choose date"),
            *(Step("click", "button", "Next month") for _ in range(months_ahead)),
            Step("click", "button", _day_label(target)),
            Step("click", "button", "Confirm date"),
        ),
    )


def autocomplete(rng: random.Random) -> Instance:
    city = rng.choice(words.CITIES)
    return Instance(
        goal=f'Choose "{city}" as your home city (type to see suggestions) and submit.',
        public={"cities": list(words.CITIES)},
        expected={"state": {"city": city}},
        solution=(
            Step("fill", "combobox", "Home city", city[:2]),
            Step("click", "option", city),
            Step("click", "button", "Submit"),
        ),
    )


def counter(rng: random.Random) -> Instance:
    start, target = rng.randint(1, 6), rng.randint(1, 9)
    while target == start:
        target = rng.randint(1, 9)
    button = "Add guest" if target > start else "Remove guest"
    return Instance(
        goal=f"Change the number of guests to {target} and confirm the booking.",
        public={"start": start},
        expected={"state": {"guests": target}},
        solution=(
            *(Step("click", "button", button) for _ in range(abs(target - start))),
            Step("click", "button", "Confirm booking"),
        ),
    )


def todo(rng: random.Random) -> Instance:
    items = [
        f"{verb} the {noun.lower()}"
        for verb, noun in zip(
            rng.sample(("Buy", "Fix", "Clean", "Paint", "Return", "Pack", "Wash"), 4),
            rng.sample(words.NOUNS, 4),
            strict=True,
        )
    ]
    initial, new_item = items[:3], items[3]
    finished = rng.choice(initial)
    expected = [{"text": text, "done": text == finished} for text in [*initial, new_item]]
    return Instance(
        goal=f'Add "{new_item}" to the to-do list, mark "{finished}" as done, then save the list.',
        public={"todos": initial},
        expected={"state": {"todos": expected}},
        solution=(
            Step("fill", "textbox", "New task", new_item),
            Step("press", text="Enter"),
            Step("click", "checkbox", finished),
            Step("click", "button", "Save list"),
        ),
    )


FAMILIES = (
    Family(
        "form",
        "Contact form",
        "fill a contact form (text, select, text area) and send it",
        contact_form,
    ),
    Family("login", "Log in", "log in with the given account among several", login),
    Family(
        "checkboxes", "Checkbox set", "tick exactly a set of boxes (some start ticked)", checkboxes
    ),
    Family("radio", "Radio choice", "pick one radio option and submit", radio),
    Family("dropdown", "Drop-down select", "choose an option of a native select", dropdown),
    Family("slider", "Slider", "set a range slider to a value", slider),
    Family("toggles", "Settings switches", "turn a set of switches on and the rest off", toggles),
    Family("wizard", "Multi-step wizard", "three steps: name, plan and seats, terms", wizard),
    Family(
        "date_picker",
        "Date picker",
        "navigate a calendar widget's months and pick a day",
        date_picker,
    ),
    Family(
        "autocomplete", "Autocomplete", "type a prefix, pick the suggestion, submit", autocomplete
    ),
    Family("counter", "Counter buttons", "press +/- buttons until a count is reached", counter),
    Family("todo", "To-do list", "add an item, complete another, save", todo),
)
