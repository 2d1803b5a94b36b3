"""Okapi BM25 over a small corpus, in pure Python (no index files, builds in milliseconds)."""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

_WORD = re.compile(r"\w+", re.UNICODE)
# Question words and glue that carry no topic; dropping them sharpens the ranking.
STOPWORDS = frozenset(
    "a an and are as at be by for from in into is it its of on or the to was were which who "
    "whom what when where in how did does do that this with".split()
)


def tokenize(text: str) -> list[str]:
    return [word for word in _WORD.findall(text.lower()) if word not in STOPWORDS]


@dataclass(frozen=True)
class BM25Index:
    """Term statistics of a corpus; `scores` ranks every document for a query."""

    term_counts: tuple[Counter, ...]
    lengths: tuple[int, ...]
    idf: dict[str, float]
    k1: float = 1.5
    b: float = 0.75

    @classmethod
    def build(cls, texts: Sequence[str], k1: float = 1.5, b: float = 0.75) -> BM25Index:
        counts = tuple(Counter(tokenize(text)) for text in texts)
        document_frequency: Counter = Counter()
        for count in counts:
            document_frequency.update(count.keys())
        total = len(texts)
        idf = {
            term: math.log(1 + (total - frequency + 0.5) / (frequency + 0.5))
            for term, frequency in document_frequency.items()
        }
        return cls(counts, tuple(sum(count.values()) for count in counts), idf, k1, b)

    def scores(self, query: str) -> list[float]:
        average = sum(self.lengths) / max(len(self.lengths), 1)
        terms = tokenize(query)
        result = []
        for count, length in zip(self.term_counts, self.lengths, strict=True):
            score = 0.0
            for term in terms:
                frequency = count.get(term, 0)
                if frequency:
                    norm = frequency + self.k1 * (1 - self.b + self.b * length / average)
                    score += self.idf[term] * frequency * (self.k1 + 1) / norm
            result.append(score)
        return result

    def top(self, query: str, k: int) -> list[tuple[int, float]]:
        """Indices and scores of the `k` best documents with a positive score, best first
        (ties broken by corpus order, so results are deterministic)."""
        ranked = sorted(enumerate(self.scores(query)), key=lambda item: (-item[1], item[0]))
        return [(index, score) for index, score in ranked[:k] if score > 0]
