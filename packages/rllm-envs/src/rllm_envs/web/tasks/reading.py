"""Families about finding information on a page and answering with ``answer("...")``."""

from __future__ import annotations

import random

from rllm_envs.web.tasks import words
from rllm_envs.web.tasks.base import Family, Instance, Step, answer_step, pick

COLUMNS = ("Department", "City", "Age", "Salary")


def _staff(rng: random.Random, count: int) -> list[dict[str, object]]:
    firsts, lasts = pick(rng, words.FIRST_NAMES, count), pick(rng, words.LAST_NAMES, count)
    return [
        {
            "Name": f"{first} {last}",
            "Department": rng.choice(words.DEPARTMENTS),
            "City": rng.choice(words.CITIES),
            "Age": rng.randint(21, 65),
            "Salary": rng.randrange(30_000, 150_000, 500),
        }
        for first, last in zip(firsts, lasts, strict=True)
    ]


def table_cell(rng: random.Random) -> Instance:
    rows = _staff(rng, 8)
    row, column = rng.choice(rows), rng.choice(COLUMNS)
    return Instance(
        goal=f"In the staff table, what is the {column.lower()} of {row['Name']}? "
        'Reply with answer("...").',
        public={"rows": rows},
        expected={"answer": str(row[column])},
        solution=answer_step(row[column]),
    )


def sort_table(rng: random.Random) -> Instance:
    rows = _staff(rng, 6)
    column = rng.choice(("Name", "Age", "Salary", "City"))
    descending = rng.random() < 0.5
    order = "descending (highest or Z first)" if descending else "ascending (lowest or A first)"
    return Instance(
        goal=f"Sort the staff table by {column} in {order} order, then save the view.",
        public={"rows": rows},
        expected={"state": {"sort": {"column": column, "descending": descending}}},
        solution=(
            *(Step("click", "button", f"Sort by {column}") for _ in range(2 if descending else 1)),
            Step("click", "button", "Save view"),
        ),
    )


TAB_FACTS = (
    ("Shipping", "Orders ship within {n} business days."),
    ("Returns", "You can return an item within {n} days of delivery."),
    ("Warranty", "Every product carries a {n}-month warranty."),
    ("Support", "Our help desk answers within {n} hours."),
)


def tabs(rng: random.Random) -> Instance:
    numbers = rng.sample(range(2, 60), len(TAB_FACTS))
    panels = {
        "Overview": f"{rng.choice(words.COMPANY_PARTS)} sells {rng.choice(words.PRODUCTS_KINDS)}."
    }
    panels.update(
        {tab: text.format(n=n) for (tab, text), n in zip(TAB_FACTS, numbers, strict=True)}
    )
    index = rng.randrange(len(TAB_FACTS))
    tab = TAB_FACTS[index][0]
    questions = {
        "Shipping": "Within how many business days do orders ship?",
        "Returns": "Within how many days can an item be returned?",
        "Warranty": "How many months of warranty does a product carry?",
        "Support": "Within how many hours does the help desk answer?",
    }
    return Instance(
        goal=f'{questions[tab]} The store page has the answer. Reply with answer("<number>").',
        public={"panels": panels},
        expected={"answer": str(numbers[index])},
        solution=(Step("click", "tab", tab), *answer_step(numbers[index])),
    )


def accordion(rng: random.Random) -> Instance:
    sections = pick(rng, ("Billing", "Security", "Account", "Privacy", "Devices", "Backups"), 5)
    codes = {
        section: f"{rng.choice(words.WORDS).upper()}-{rng.randint(1000, 9999)}"
        for section in sections
    }
    section = rng.choice(sections)
    return Instance(
        goal=f'Find the access code in the "{section}" section of the help page. '
        'Reply with answer("<code>").',
        public={"codes": codes},
        expected={"answer": codes[section]},
        solution=(Step("click", "button", section), *answer_step(codes[section])),
    )


def pagination(rng: random.Random) -> Instance:
    names = [
        f"{adjective} {noun}" for adjective in words.ADJECTIVES[:8] for noun in words.NOUNS[:5]
    ]
    rng.shuffle(names)
    items = [{"name": name, "sku": f"SKU-{rng.randint(10000, 99999)}"} for name in names]
    index = rng.randrange(len(items))
    page = index // 8 + 1
    steps = (Step("click", "link", f"Page {page}"),) if page > 1 else ()
    return Instance(
        goal=f"The catalogue lists its products over several pages. What is the SKU of "
        f'"{items[index]["name"]}"? Reply with answer("SKU-...").',
        public={"items": items, "per_page": 8},
        expected={"answer": items[index]["sku"]},
        solution=(*steps, *answer_step(items[index]["sku"])),
    )


def extract(rng: random.Random) -> Instance:
    companies = []
    for part, kind in zip(
        pick(rng, words.COMPANY_PARTS, 4), pick(rng, words.COMPANY_KINDS, 4), strict=True
    ):
        companies.append(
            {
                "name": f"{part} {kind}",
                "founder": f"{rng.choice(words.FIRST_NAMES)} {rng.choice(words.LAST_NAMES)}",
                "year": rng.randint(1890, 2020),
                "city": rng.choice(words.CITIES),
                "product": rng.choice(words.PRODUCTS_KINDS),
            }
        )
    company = rng.choice(companies)
    field, question = rng.choice(
        (
            ("year", "In which year was {name} founded?"),
            ("city", "In which city was {name} founded?"),
            ("founder", "Who founded {name}?"),
            ("product", "What does {name} make?"),
        )
    )
    return Instance(
        goal=question.format(name=company["name"])
        + ' Read the article and reply with answer("...").',
        public={"companies": companies},
        expected={"answer": str(company[field])},
        solution=answer_step(company[field]),
    )


FAMILIES = (
    Family("table_cell", "Table lookup", "read one cell of a staff table", table_cell),
    Family("sort_table", "Sortable table", "sort a table by a column and direction", sort_table),
    Family("tabs", "Tabs", "open the right tab to find a number", tabs),
    Family("accordion", "Accordion", "expand a collapsed section to read a code", accordion),
    Family("pagination", "Pagination", "page through a catalogue to find an item", pagination),
    Family("extract", "Article question", "answer a question about a generated article", extract),
)
