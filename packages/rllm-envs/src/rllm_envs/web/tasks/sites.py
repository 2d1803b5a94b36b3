"""Families that span several pages or dialogs: search, site navigation, a shop, a modal."""

from __future__ import annotations

import random

from rllm_envs.web.tasks import words
from rllm_envs.web.tasks.base import Family, Instance, Step, pick


def search(rng: random.Random) -> Instance:
    names = sorted({f"{rng.choice(words.ADJECTIVES)} {rng.choice(words.NOUNS)}" for _ in range(40)})
    items = [
        {"id": index + 1, "name": name, "price": rng.randrange(500, 20000) / 100}
        for index, name in enumerate(names)
    ]
    item = rng.choice(items)
    query = item["name"].split()[-1]  # the noun: several items share it, so results need a look
    return Instance(
        goal=f'Search the catalogue for "{item["name"]}", open it and select it.',
        public={"items": items},
        expected={"state": {"selected": item["id"]}},
        solution=(
            Step("fill", "searchbox", "Search products", query),
            Step("press", text="Enter"),
            Step("click", "link", item["name"]),
            Step("click", "button", "Select this item"),
        ),
    )


def navigate(rng: random.Random) -> Instance:
    sections = pick(rng, words.SECTIONS, 4)
    tree = {section: pick(rng, words.TOPICS, 4) for section in sections}
    section = rng.choice(sections)
    topic = rng.choice(tree[section])
    return Instance(
        goal=f'On the community site, open the "{topic}" page of the "{section}" section and '
        "bookmark it.",
        public={"tree": tree},
        expected={"state": {"bookmarked": f"{section}/{topic}"}},
        solution=(
            Step("click", "link", section),
            Step("click", "link", topic),
            Step("click", "button", "Bookmark this page"),
        ),
    )


def cart(rng: random.Random) -> Instance:
    fruits = pick(rng, words.FRUITS, 6)
    products = [{"name": name, "price": rng.randrange(50, 900) / 100} for name in fruits]
    order = {name: rng.randint(1, 5) for name in rng.sample(fruits, rng.randint(1, 3))}
    wanted = " and ".join(f"{count} x {name}" for name, count in order.items())
    steps: list[Step] = []
    for name, count in order.items():
        steps.append(Step("fill", "spinbutton", f"Quantity of {name}", str(count)))
        steps.append(Step("click", "button", f"Add {name} to cart"))
    return Instance(
        goal=f"In the fruit shop, buy exactly {wanted}: add them to the cart, open the cart "
        "and place the order.",
        public={"products": products},
        expected={"state": {"order": dict(sorted(order.items()))}},
        solution=(
            *steps,
            Step("click", "link", "View cart"),
            Step("click", "button", "Place order"),
        ),
    )


def modal(rng: random.Random) -> Instance:
    files = [f"{word}-{rng.randint(1, 99)}.txt" for word in pick(rng, words.WORDS, 6)]
    target = rng.choice(files)
    return Instance(
        goal=f'Delete the file "{target}" (confirm in the dialog) and no other file.',
        public={"files": files},
        expected={"state": {"deleted": [target]}},
        solution=(
            Step("click", "button", f"Delete {target}"),
            Step("click", "button", "Delete"),
            Step("click", "button", "Done"),
        ),
    )


FAMILIES = (
    Family("search", "Search and select", "search a catalogue, open a result, select it", search),
    Family("navigate", "Site navigation", "follow links across pages to bookmark one", navigate),
    Family("cart", "Shop cart", "add quantities of products to a cart and check out", cart),
    Family("modal", "Modal dialog", "delete one file through a confirmation dialog", modal),
)
