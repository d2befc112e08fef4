"""A small demo corpus of generated sentences on ten clearly different topics.

Deterministic (a fixed seed over fixed word lists), so searches over it give the same hits
everywhere. Each row has an id, a topic and a body of about 12-20 words.

>>> rows = demo_corpus(50)
>>> len(rows["id"]), rows["topic"][0] in TOPICS
(50, True)
>>> demo_corpus(3000)["body"] == demo_corpus(3000)["body"]
True
"""

from __future__ import annotations

import random

# topic -> (subjects, actions, details)
TOPICS: dict[str, tuple[list[str], list[str], list[str]]] = {
    "baking": (
        ["The baker", "My grandmother", "The pastry chef", "A home cook", "The recipe", "Our bakery"],
        ["kneads the bread dough", "lets the yeast dough rise", "folds butter into the pastry",
         "bakes sourdough loaves", "mixes flour, salt and water", "proofs the dough overnight"],
        ["before baking it in a hot oven.", "until the crust turns golden brown.", "for a soft and airy crumb.",
         "with a pinch of sugar to feed the yeast.", "and dusts the loaf with flour.", "so the bread rises well."],
    ),
    "finance": (
        ["The central bank", "Stock markets", "Investors", "The bond market", "Pension funds", "Bank shares"],
        ["raised interest rates", "fell sharply after the inflation report", "sold government bonds",
         "rallied on strong earnings", "cut their equity holdings", "priced in another rate hike"],
        ["as inflation stayed high.", "while the currency weakened.", "ahead of the quarterly earnings season.",
         "and mortgage costs climbed.", "amid fears of a recession.", "after the monetary policy meeting."],
    ),
    "football": (
        ["The striker", "The goalkeeper", "The home team", "The coach", "Our midfielder", "The captain"],
        ["scored a late goal", "saved a penalty kick", "won the league match", "changed the team formation",
         "passed the ball through the defence", "lifted the championship trophy"],
        ["in front of a sold-out stadium.", "in the final minute of the game.", "after extra time.",
         "to send the fans into celebration.", "against their fiercest rivals.", "during the cup final."],
    ),
    "astronomy": (
        ["The telescope", "Astronomers", "The space probe", "The observatory", "A young star", "The rover"],
        ["observed a distant galaxy", "measured the light of an exoplanet", "orbited the planet Jupiter",
         "detected a supernova explosion", "mapped craters on the Moon", "studied a black hole"],
        ["billions of light years away.", "through the night sky.", "using infrared cameras.",
         "at the edge of the solar system.", "with a powerful radio antenna.", "after launching into orbit."],
    ),
    "medicine": (
        ["The doctor", "The nurse", "The surgeon", "The patient", "Hospital staff", "The pharmacist"],
        ["prescribed antibiotics for the infection", "measured the patient's blood pressure",
         "performed heart surgery", "recovered after the operation", "gave the flu vaccine",
         "treated the fever and cough"],
        ["at the hospital clinic.", "in the emergency room.", "before the symptoms got worse.",
         "following the medical guidelines.", "during the morning ward round.", "to prevent a relapse."],
    ),
    "programming": (
        ["The developer", "Our software team", "The compiler", "The programmer", "The code review", "The test suite"],
        ["fixed a bug in the database query", "refactored the Python module", "deployed the web application",
         "wrote unit tests for the parser", "optimized the sorting algorithm", "merged the pull request"],
        ["before the software release.", "to reduce memory usage.", "using continuous integration.",
         "after profiling the slow function.", "on the production server.", "and updated the documentation."],
    ),
    "music": (
        ["The orchestra", "The guitarist", "The singer", "The pianist", "The jazz band", "The composer"],
        ["performed a symphony", "played a guitar solo", "sang the chorus", "rehearsed the piano concerto",
         "improvised a jazz melody", "wrote a new song"],
        ["at the concert hall.", "in front of a cheering audience.", "with a violin accompaniment.",
         "for the album recording.", "during the music festival.", "in a minor key."],
    ),
    "gardening": (
        ["The gardener", "My neighbour", "The farmer", "Our allotment", "The greenhouse", "The orchard"],
        ["planted tomato seedlings", "watered the vegetable beds", "pruned the rose bushes",
         "harvested ripe apples", "spread compost on the soil", "pulled weeds from the flower garden"],
        ["in early spring.", "before the summer heat.", "to help the plants grow.", "after the last frost.",
         "along the garden fence.", "for a bigger harvest."],
    ),
    "travel": (
        ["The train", "Our flight", "The tourists", "The ferry", "The travel guide", "The hotel"],
        ["departed from the central station", "landed at the airport", "explored the old town",
         "crossed the sea to the island", "booked rooms near the beach", "checked our passports"],
        ["on the way to Paris.", "for a summer holiday.", "after a long journey.", "with a view of the mountains.",
         "before the boarding gate closed.", "during the sightseeing tour."],
    ),
    "pets": (
        ["The puppy", "My cat", "The kitten", "Our dog", "The veterinarian", "The rabbit"],
        ["chased a ball in the park", "slept on the warm windowsill", "purred on the sofa",
         "barked at the mailman", "examined the sick dog", "nibbled fresh carrots"],
        ["all afternoon.", "while the family was at work.", "after a long walk.", "and wagged its tail.",
         "at the animal clinic.", "in its little hutch."],
    ),
}


_OPENERS = ["", "Yesterday, ", "This morning, ", "Once again, "]


def demo_corpus(rows: int = 3000, seed: int = 7) -> dict[str, list]:
    """``rows`` distinct sentences, topics interleaved, as columns (id, topic, body)."""
    rng = random.Random(seed)
    pools = {}
    for topic, (subjects, actions, details) in TOPICS.items():
        combos = [
            f"{opener}{s if not opener else s[0].lower() + s[1:]} {a} {d}"
            for opener in _OPENERS
            for s in subjects
            for a in actions
            for d in details
        ]
        rng.shuffle(combos)
        pools[topic] = combos
    per_topic = max(len(p) for p in pools.values())
    if rows > per_topic * len(TOPICS):
        raise ValueError(f"the demo corpus holds at most {per_topic * len(TOPICS)} distinct rows")
    ids, topics, bodies = [], [], []
    for i in range(rows):
        topic = list(TOPICS)[i % len(TOPICS)]
        ids.append(i + 1)
        topics.append(topic)
        bodies.append(pools[topic][i // len(TOPICS)])
    return {"id": ids, "topic": topics, "body": bodies}
