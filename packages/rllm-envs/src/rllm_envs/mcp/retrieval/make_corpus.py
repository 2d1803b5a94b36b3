"""Writes the shipped retrieval corpus and its multi-hop questions (``python -m
rllm_envs.mcp.retrieval.make_corpus``).

The world is fictional and generated from a fixed seed: towns on rivers, people born in towns
who taught each other, and the works they made. Being invented, no model knows the answers
beforehand; each question needs two or three documents found by search. Output:
``corpus.jsonl`` (``doc_id``, ``title``, ``text``) and the questions, ``train.jsonl`` and
``test.jsonl`` (``task_id``, ``question``, ``answer``, ``hops``, ``split``,
``supporting_docs``).
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass
from pathlib import Path

SEED = 20261122
DATA_DIR = Path(__file__).parent / "data"

ONSETS = [
    "b",
    "d",
    "f",
    "g",
    "k",
    "l",
    "m",
    "n",
    "p",
    "r",
    "s",
    "t",
    "v",
    "z",
    "br",
    "dr",
    "gl",
    "kr",
    "st",
    "th",
    "tr",
    "vel",
    "mor",
    "sel",
]
VOWELS = ["a", "e", "i", "o", "u", "ai", "ea", "ou"]
CODAS = ["", "n", "r", "l", "s", "th", "nd", "rk", "m", "x"]
PROFESSIONS = [
    "clockmaker",
    "composer",
    "cartographer",
    "glassblower",
    "astronomer",
    "engineer",
    "poet",
    "botanist",
    "painter",
    "shipwright",
]
WORK_KINDS = {
    "clockmaker": "clock",
    "composer": "symphony",
    "cartographer": "atlas",
    "glassblower": "lens",
    "astronomer": "star catalogue",
    "engineer": "bridge",
    "poet": "poem cycle",
    "botanist": "herbarium",
    "painter": "fresco",
    "shipwright": "schooner",
}


@dataclass
class Town:
    doc_id: str
    name: str
    river: str
    founded: int
    region: str


@dataclass
class Person:
    doc_id: str
    name: str
    profession: str
    born: int
    town: Town
    teacher: Person | None = None


@dataclass
class Work:
    doc_id: str
    name: str
    kind: str
    year: int
    maker: Person


def _word(rng: random.Random, syllables: int) -> str:
    parts = [rng.choice(ONSETS) + rng.choice(VOWELS) + rng.choice(CODAS) for _ in range(syllables)]
    return "".join(parts).capitalize()


def _unique(rng: random.Random, used: set[str], syllables: int) -> str:
    while True:
        word = _word(rng, syllables)
        if word not in used and len(word) > 3:
            used.add(word)
            return word


def build_world(rng: random.Random) -> tuple[list[Town], list[Person], list[Work]]:
    used: set[str] = set()
    regions = [_unique(rng, used, 3) for _ in range(5)]
    rivers = [_unique(rng, used, 2) for _ in range(12)]
    towns = [
        Town(
            f"town-{index:02d}",
            _unique(rng, used, 2),
            rng.choice(rivers),
            rng.randint(900, 1600),
            rng.choice(regions),
        )
        for index in range(20)
    ]
    people: list[Person] = []
    for index in range(36):
        teacher = rng.choice(people) if people and rng.random() < 0.8 else None
        born = (teacher.born + rng.randint(18, 40)) if teacher else rng.randint(1600, 1700)
        name = f"{_unique(rng, used, 2)} {_unique(rng, used, 3)}"
        people.append(
            Person(
                f"person-{index:02d}",
                name,
                rng.choice(PROFESSIONS),
                born,
                rng.choice(towns),
                teacher,
            )
        )
    works = []
    for index, maker in enumerate(people):
        kind = WORK_KINDS[maker.profession]
        title = f"the {_unique(rng, used, 2)} {kind}"
        works.append(
            Work(f"work-{index:02d}", title, kind, maker.born + rng.randint(22, 50), maker)
        )
    return towns, people, works


def documents(towns: list[Town], people: list[Person], works: list[Work]) -> list[dict]:
    docs = []
    for town in towns:
        natives = [person.name for person in people if person.town is town]
        text = (
            f"{town.name} is a town in the {town.region} region, founded in {town.founded}. "
            f"It lies on the river {town.river}, whose ferries and mills shaped its trade. "
        )
        text += (
            f"Notable people born in {town.name} include {', '.join(natives)}."
            if natives
            else f"{town.name} is known more for its markets than for famous natives."
        )
        docs.append({"doc_id": town.doc_id, "title": town.name, "text": text})
    for person in people:
        made = [work for work in works if work.maker is person]
        text = (
            f"{person.name} (born {person.born}) was a {person.profession} "
            f"born in the town of {person.town.name}. "
        )
        text += (
            f"{person.name.split()[0]} trained under {person.teacher.name}. "
            if person.teacher
            else f"{person.name.split()[0]} was largely self-taught. "
        )
        students = [other.name for other in people if other.teacher is person]
        if students:
            text += f"Students of {person.name} included {', '.join(students)}. "
        text += " ".join(f"In {work.year} {person.name} completed {work.name}." for work in made)
        docs.append({"doc_id": person.doc_id, "title": person.name, "text": text.strip()})
    for work in works:
        title = work.name[4:].capitalize()  # without the leading "the "
        text = (
            f"{title[0].upper() + title[1:]} is a {work.kind} completed in {work.year} by the "
            f"{work.maker.profession} {work.maker.name}. Records of it are kept in the archives "
            f"of the {work.maker.town.region} region, where it is still studied for its craft."
        )
        docs.append({"doc_id": work.doc_id, "title": title, "text": text})
    return docs


def questions(people: list[Person], works: list[Work]) -> list[dict]:
    """Two- and three-hop questions; each names one entity and needs a chain of documents."""
    rows = []
    for work in works:
        maker = work.maker
        rows.append(
            {
                "question": f"In which town was the maker of {work.name} born?",
                "answer": maker.town.name,
                "hops": 2,
                "supporting_docs": [work.doc_id, maker.doc_id],
            }
        )
        rows.append(
            {
                "question": f"On which river lies the birthplace of the maker of {work.name}?",
                "answer": maker.town.river,
                "hops": 3,
                "supporting_docs": [work.doc_id, maker.doc_id, maker.town.doc_id],
            }
        )
        if maker.teacher is not None:
            rows.append(
                {
                    "question": f"Who taught the {maker.profession} who completed {work.name}?",
                    "answer": maker.teacher.name,
                    "hops": 2,
                    "supporting_docs": [work.doc_id, maker.doc_id],
                }
            )
    for person in people:
        rows.append(
            {
                "question": f"In what year was the birthplace of {person.name} founded?",
                "answer": str(person.town.founded),
                "hops": 2,
                "supporting_docs": [person.doc_id, person.town.doc_id],
            }
        )
        if person.teacher is not None:
            rows.append(
                {
                    "question": f"In which town was the teacher of {person.name} born?",
                    "answer": person.teacher.town.name,
                    "hops": 2,
                    "supporting_docs": [person.doc_id, person.teacher.doc_id],
                }
            )
    return rows


def main() -> None:
    rng = random.Random(SEED)
    towns, people, works = build_world(rng)
    docs = documents(towns, people, works)
    rows = questions(people, works)
    rng.shuffle(rows)
    test_size = len(rows) // 5
    for index, row in enumerate(rows):
        row["task_id"] = f"mcp-retrieval-{index:03d}"
        row["split"] = "test" if index < test_size else "train"
    DATA_DIR.mkdir(exist_ok=True)
    splits = {
        "corpus.jsonl": docs,
        "train.jsonl": [row for row in rows if row["split"] == "train"],
        "test.jsonl": [row for row in rows if row["split"] == "test"],
    }
    for name, items in splits.items():
        with (DATA_DIR / name).open("w", encoding="utf-8") as handle:
            for item in items:
                handle.write(json.dumps(item, ensure_ascii=False) + "\n")
    print(f"{len(docs)} documents, {len(rows)} questions ({test_size} test) in {DATA_DIR}")


if __name__ == "__main__":
    main()
