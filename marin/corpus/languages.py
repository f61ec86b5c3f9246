"""Short texts in five languages, for training and testing a language classifier offline.

No language-identification model can be downloaded here, so the corpus ships its own labelled samples:
sentences built from per-language templates and word lists (each language has its own spelling, function
words and accents, which is what a character n-gram classifier keys on)::

    >>> text = paragraph("de", random.Random(0))
    'Der kleine Hund läuft jeden Morgen in den Garten. ...'

The same generator writes the foreign-language web pages of ``marin.corpus.web``, from another random
stream, so a classifier trained on ``langid/<lang>.jsonl.gz`` is tested on pages it never saw.
"""

from __future__ import annotations

import random

# Per language: subjects, adjectives, places, and sentence templates over {s} {a} {p} {n} (a number word).
_LEXICON: dict[str, dict[str, list[str]]] = {
    "en": {
        "s": ["the dog", "the teacher", "my neighbour", "the old man", "a young girl", "the farmer", "our family"],
        "a": ["happy", "tired", "quiet", "careful", "busy", "proud", "hungry"],
        "p": ["the market", "the school", "the river", "the old church", "the station", "the library"],
        "n": ["two", "three", "four", "five", "six", "seven"],
        "t": [
            "{s} walks to {p} every morning.",
            "Yesterday {s} was very {a} after work.",
            "We saw {s} near {p} with {n} friends.",
            "Nobody knows why {s} is so {a} today.",
            "In the evening {s} reads a book at {p}.",
            "It takes {n} minutes to reach {p} by bus.",
            "When it rains, {s} stays at home and feels {a}.",
        ],
    },
    "de": {
        "s": [
            "der Hund",
            "die Lehrerin",
            "mein Nachbar",
            "der alte Mann",
            "ein junges Mädchen",
            "der Bauer",
            "unsere Familie",
        ],
        "a": ["glücklich", "müde", "ruhig", "vorsichtig", "beschäftigt", "stolz", "hungrig"],
        "p": ["den Markt", "die Schule", "den Fluss", "die alte Kirche", "den Bahnhof", "die Bücherei"],
        "n": ["zwei", "drei", "vier", "fünf", "sechs", "sieben"],
        "t": [
            "Jeden Morgen geht {s} in {p}.",
            "Gestern war {s} nach der Arbeit sehr {a}.",
            "Wir haben {s} mit {n} Freunden gesehen.",
            "Niemand weiß, warum {s} heute so {a} ist.",
            "Am Abend liest {s} ein Buch über {p}.",
            "Man braucht {n} Minuten bis in {p} mit dem Bus.",
            "Wenn es regnet, bleibt {s} zu Hause und ist {a}.",
        ],
    },
    "fr": {
        "s": [
            "le chien",
            "la maîtresse",
            "mon voisin",
            "le vieil homme",
            "une jeune fille",
            "le fermier",
            "notre famille",
        ],
        "a": ["heureux", "fatigué", "calme", "prudent", "occupé", "fier", "affamé"],
        "p": ["le marché", "l'école", "la rivière", "la vieille église", "la gare", "la bibliothèque"],
        "n": ["deux", "trois", "quatre", "cinq", "six", "sept"],
        "t": [
            "Chaque matin, {s} va vers {p}.",
            "Hier, {s} était très {a} après le travail.",
            "Nous avons vu {s} avec {n} amis.",
            "Personne ne sait pourquoi {s} est si {a} aujourd'hui.",
            "Le soir, {s} lit un livre près de {p}.",
            "Il faut {n} minutes pour aller à {p} en bus.",
            "Quand il pleut, {s} reste à la maison et se sent {a}.",
        ],
    },
    "es": {
        "s": ["el perro", "la maestra", "mi vecino", "el anciano", "una niña", "el granjero", "nuestra familia"],
        "a": ["feliz", "cansado", "tranquilo", "cuidadoso", "ocupado", "orgulloso", "hambriento"],
        "p": ["el mercado", "la escuela", "el río", "la vieja iglesia", "la estación", "la biblioteca"],
        "n": ["dos", "tres", "cuatro", "cinco", "seis", "siete"],
        "t": [
            "Cada mañana {s} camina hacia {p}.",
            "Ayer {s} estaba muy {a} después del trabajo.",
            "Vimos a {s} con {n} amigos.",
            "Nadie sabe por qué {s} está tan {a} hoy.",
            "Por la tarde {s} lee un libro cerca de {p}.",
            "Se tarda {n} minutos en llegar a {p} en autobús.",
            "Cuando llueve, {s} se queda en casa y está {a}.",
        ],
    },
    "it": {
        "s": [
            "il cane",
            "la maestra",
            "il mio vicino",
            "il vecchio",
            "una ragazza",
            "il contadino",
            "la nostra famiglia",
        ],
        "a": ["felice", "stanco", "tranquillo", "attento", "occupato", "orgoglioso", "affamato"],
        "p": ["il mercato", "la scuola", "il fiume", "la vecchia chiesa", "la stazione", "la biblioteca"],
        "n": ["due", "tre", "quattro", "cinque", "sei", "sette"],
        "t": [
            "Ogni mattina {s} va verso {p}.",
            "Ieri {s} era molto {a} dopo il lavoro.",
            "Abbiamo visto {s} con {n} amici.",
            "Nessuno sa perché {s} è così {a} oggi.",
            "La sera {s} legge un libro vicino a {p}.",
            "Ci vogliono {n} minuti per arrivare a {p} in autobus.",
            "Quando piove, {s} resta a casa e si sente {a}.",
        ],
    },
}
LANGUAGES = tuple(sorted(_LEXICON))


def sentence(lang: str, rng: random.Random) -> str:
    lex = _LEXICON[lang]
    text = rng.choice(lex["t"]).format(
        s=rng.choice(lex["s"]), a=rng.choice(lex["a"]), p=rng.choice(lex["p"]), n=rng.choice(lex["n"])
    )
    return text[0].upper() + text[1:]


def paragraph(lang: str, rng: random.Random, sentences: tuple[int, int] = (3, 6)) -> str:
    """A few sentences of ``lang`` (one of ``LANGUAGES``) on one line."""
    if lang not in _LEXICON:
        raise ValueError(f"language {lang!r}: expected one of {', '.join(LANGUAGES)}")
    return " ".join(sentence(lang, rng) for _ in range(rng.randint(*sentences)))


def document(lang: str, rng: random.Random) -> str:
    """Two to four paragraphs separated by blank lines."""
    return "\n\n".join(paragraph(lang, rng) for _ in range(rng.randint(2, 4)))
