"""A small built-in English→French corpus, generated from our own little grammar.

Subjects × predicates × {affirmative, negative, question} × time adverbs, with correct French
conjugation, gender/number agreement of adjectives, elision (j'aime, n'aime, qu'elle), the partitive
after negation (je mange une pomme → je ne mange pas de pomme) and "est-ce que" questions. It
contains the course notes' example "I am good." → "Je vais bien.", and lets ``tformer demo`` run
with no data and no network.

>>> ("I am good.", "Je vais bien.") in builtin_pairs()
True
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["builtin_pairs"]

VOWELS = tuple("aeiouhéèêâ")


@dataclass(frozen=True)
class Subject:
    en: str
    fr: str
    person: int  # index into conjugation tables: 0 je, 1 tu, 2 il/elle, 3 nous, 4 ils
    feminine: bool = False
    plural: bool = False


SUBJECTS = [
    Subject("I", "je", 0),
    Subject("you", "tu", 1),
    Subject("he", "il", 2),
    Subject("she", "elle", 2, feminine=True),
    Subject("we", "nous", 3, plural=True),
    Subject("they", "ils", 4, plural=True),
]
BE_EN = ["am", "are", "is", "is", "are", "are"]  # by subject index
BE_FR = ["suis", "es", "est", "sommes", "sont"]  # by person
ALLER_FR = ["vais", "vas", "va", "allons", "vont"]

# adjective: English, French forms (masc sing, fem sing, masc plur, fem plur)
ADJECTIVES = [
    ("tired", ("fatigué", "fatiguée", "fatigués", "fatiguées")),
    ("happy", ("heureux", "heureuse", "heureux", "heureuses")),
    ("ready", ("prêt", "prête", "prêts", "prêtes")),
    ("busy", ("occupé", "occupée", "occupés", "occupées")),
    ("sad", ("triste", "triste", "tristes", "tristes")),
]

# verb: English base, English 3rd person, French forms by person
VERBS = [
    ("eat", "eats", ["mange", "manges", "mange", "mangeons", "mangent"]),
    ("see", "sees", ["vois", "vois", "voit", "voyons", "voient"]),
    ("like", "likes", ["aime", "aimes", "aime", "aimons", "aiment"]),
    ("have", "has", ["ai", "as", "a", "avons", "ont"]),
    ("want", "wants", ["veux", "veux", "veut", "voulons", "veulent"]),
]
# object: English, French article, French noun (article "un"/"une"/"du" become "de" after negation)
OBJECTS = {
    "eat": [
        ("an apple", "une", "pomme"),
        ("bread", "du", "pain"),
        ("the cake", "le", "gâteau"),
        ("the soup", "la", "soupe"),
    ],
    "see": [
        ("the cat", "le", "chat"),
        ("the house", "la", "maison"),
        ("a bird", "un", "oiseau"),
        ("the sea", "la", "mer"),
    ],
    "like": [
        ("music", "la", "musique"),
        ("coffee", "le", "café"),
        ("the book", "le", "livre"),
        ("the film", "le", "film"),
    ],
    "have": [
        ("a dog", "un", "chien"),
        ("a car", "une", "voiture"),
        ("a brother", "un", "frère"),
        ("time", "du", "temps"),
    ],
    "want": [
        ("an apple", "une", "pomme"),
        ("a coffee", "un", "café"),
        ("the book", "le", "livre"),
        ("water", "de l'", "eau"),
    ],
}
TIMES = [("", ""), (" today", " aujourd'hui"), (" every day", " tous les jours")]


def _elide(word: str, next_word: str) -> str:
    """je/ne/que/le/la before a vowel → j'/n'/qu'/l'."""
    if next_word.startswith(VOWELS) and word in ("je", "ne", "que", "le", "la", "de"):
        return {"je": "j'", "ne": "n'", "que": "qu'", "le": "l'", "la": "l'", "de": "d'"}[word]
    return word + " "


def _join(*words: str) -> str:
    """Join French words, applying elision between them."""
    kept = [w for w in words if w]
    out = ""
    for word, nxt in zip(kept, kept[1:] + [""]):
        out += _elide(word, nxt) if nxt else word
    return out


def _object_fr(article: str, noun: str, negative: bool) -> str:
    if negative and article in ("un", "une", "du", "de l'"):
        article = "de"
    if article.endswith("'"):
        return article + noun
    return _join(article, noun)


def _sentence(en: str, fr: str, question: bool) -> tuple[str, str]:
    en = en[0].upper() + en[1:] + ("?" if question else ".")
    fr = fr[0].upper() + fr[1:] + (" ?" if question else ".")
    return en, fr


def _adjective_pairs(s: Subject, i: int) -> list[tuple[str, str]]:
    pairs = []
    for adj_en, forms in ADJECTIVES:
        adj_fr = forms[2 * s.plural + s.feminine]
        be_en, be_fr = BE_EN[i], BE_FR[s.person]
        pairs.append(_sentence(f"{s.en} {be_en} {adj_en}", _join(s.fr, be_fr, adj_fr), False))
        pairs.append(_sentence(f"{s.en} {be_en} not {adj_en}", _join(s.fr, "ne", be_fr, "pas", adj_fr), False))
        pairs.append(_sentence(f"{be_en} {s.en} {adj_en}", _join("est-ce", "que", s.fr, be_fr, adj_fr), True))
    good_en = f"{s.en} {BE_EN[i]} good"
    pairs.append(_sentence(good_en, _join(s.fr, ALLER_FR[s.person], "bien"), False))
    pairs.append(_sentence(f"{BE_EN[i]} {s.en} good", _join("est-ce", "que", s.fr, ALLER_FR[s.person], "bien"), True))
    return pairs


def _verb_pairs(s: Subject, i: int) -> list[tuple[str, str]]:
    pairs = []
    third = s.person == 2
    do_en = "does" if third else "do"
    for base, third_en, forms in VERBS:
        verb_en, verb_fr = (third_en if third else base), forms[s.person]
        for obj_en, article, noun in OBJECTS[base]:
            for time_en, time_fr in TIMES:
                pos_fr = _join(s.fr, verb_fr, _object_fr(article, noun, False)) + time_fr
                neg_fr = _join(s.fr, "ne", verb_fr, "pas", _object_fr(article, noun, True)) + time_fr
                q_fr = _join("est-ce", "que", s.fr, verb_fr, _object_fr(article, noun, False)) + time_fr
                pairs.append(_sentence(f"{s.en} {verb_en} {obj_en}{time_en}", pos_fr, False))
                pairs.append(_sentence(f"{s.en} {do_en} not {base} {obj_en}{time_en}", neg_fr, False))
                pairs.append(_sentence(f"{do_en} {s.en} {base} {obj_en}{time_en}", q_fr, True))
    return pairs


def builtin_pairs() -> list[tuple[str, str]]:
    """All (English, French) pairs of the built-in corpus, in a fixed order."""
    pairs = []
    for i, subject in enumerate(SUBJECTS):
        pairs += _adjective_pairs(subject, i)
        pairs += _verb_pairs(subject, i)
    return pairs
