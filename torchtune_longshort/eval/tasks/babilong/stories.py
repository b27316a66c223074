"""bAbI QA1-QA5 stories whose answers are correct by construction (the simulator's world state is the answer).

The story half of the BABILong generator (:mod:`torchtune_longshort.eval.tasks.babilong.generator`): people, objects,
locations and moves; relations for QA4; hand-overs for QA5. The label sets are BABILong's own (its metrics.py
``TASK_LABELS``), so every answer is one of them.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Callable, Dict, List, Optional, Tuple

QA_TASKS = ("qa1", "qa2", "qa3", "qa4", "qa5")

# BABILong's task label sets (its metrics.py TASK_LABELS): answers are always drawn from these.
LOCATIONS = ("bathroom", "bedroom", "garden", "hallway", "kitchen", "office")
QA1_3_PEOPLE = ("Mary", "John", "Daniel", "Sandra")
QA1_3_OBJECTS = ("apple", "football", "milk")
QA5_PEOPLE = ("Bill", "Fred", "Jeff", "Mary")
QA5_OBJECTS = ("apple", "football", "milk")
TASK_LABELS: Dict[str, frozenset] = {
    "qa1": frozenset(LOCATIONS), "qa2": frozenset(LOCATIONS), "qa3": frozenset(LOCATIONS),
    "qa4": frozenset(LOCATIONS), "qa5": frozenset(QA5_PEOPLE + QA5_OBJECTS),
}
MOVE_VERBS = ("moved to", "went to", "journeyed to", "travelled to", "went back to")
GRAB_VERBS = ("picked up", "got", "grabbed", "took")
DROP_VERBS = ("dropped", "put down", "discarded", "left")
GIVE_VERBS = ("gave", "handed", "passed")
DIRECTIONS = ("north", "south", "east", "west")


@dataclass
class Story:
    """A bAbI story: its sentences in order, the question and the answer (a label of the task)."""

    qa: str
    facts: List[str]
    question: str
    answer: str
    supporting: List[int] = field(default_factory=list)  # indices into ``facts``


def check_qa(qa: str) -> None:
    """Raise ``ValueError`` naming the accepted tasks unless ``qa`` is one of :data:`QA_TASKS`."""
    if qa not in QA_TASKS:
        raise ValueError(f"qa={qa!r} is not supported; accepted: {list(QA_TASKS)}")


def _qa1(rng: random.Random) -> Story:
    where: Dict[str, str] = {}
    facts, last = [], {}
    for _ in range(rng.randint(4, 8)):
        p = rng.choice(QA1_3_PEOPLE)
        loc = rng.choice([l for l in LOCATIONS if l != where.get(p)])
        where[p] = loc
        last[p] = len(facts)
        facts.append(f"{p} {rng.choice(MOVE_VERBS)} the {loc}.")
    p = rng.choice(sorted(where))
    return Story("qa1", facts, f"Where is {p}?", where[p], [last[p]])


def _carry_world(rng: random.Random, n_events: int, people, objects):
    """Simulate moves, grabs and drops; yields (facts, object location histories, object supporting facts)."""
    where: Dict[str, str] = {}
    holder: Dict[str, Optional[str]] = {o: None for o in objects}
    obj_loc: Dict[str, Optional[str]] = {o: None for o in objects}
    history: Dict[str, List[str]] = {o: [] for o in objects}
    support: Dict[str, List[int]] = {o: [] for o in objects}
    facts: List[str] = []

    def note(o: str, loc: str, i: int) -> None:
        obj_loc[o] = loc
        if not history[o] or history[o][-1] != loc:
            history[o].append(loc)
        support[o].append(i)

    for _ in range(n_events):
        p = rng.choice(people)
        held = [o for o in objects if holder[o] == p]
        free_here = [o for o in objects if holder[o] is None and p in where and obj_loc[o] in (None, where[p])]
        kind = rng.choices(["move", "grab", "drop"], weights=[3, 2 if free_here else 0, 1 if held else 0])[0]
        i = len(facts)
        if kind == "move":
            loc = rng.choice([l for l in LOCATIONS if l != where.get(p)])
            where[p] = loc
            facts.append(f"{p} {rng.choice(MOVE_VERBS)} the {loc}.")
            for o in held:
                note(o, loc, i)
        elif kind == "grab":
            o = rng.choice(free_here)
            holder[o] = p
            facts.append(f"{p} {rng.choice(GRAB_VERBS)} the {o} there.")
            note(o, where[p], i)
        else:
            o = rng.choice(held)
            holder[o] = None
            facts.append(f"{p} {rng.choice(DROP_VERBS)} the {o}.")
            note(o, where[p], i)
    return facts, obj_loc, history, support


def _qa2(rng: random.Random) -> Story:
    while True:
        facts, obj_loc, _, support = _carry_world(rng, rng.randint(6, 10), QA1_3_PEOPLE, QA1_3_OBJECTS)
        known = sorted(o for o in QA1_3_OBJECTS if obj_loc[o] is not None)
        if known:
            o = rng.choice(known)
            return Story("qa2", facts, f"Where is the {o}?", obj_loc[o], support[o])


def _qa3(rng: random.Random) -> Story:
    while True:
        facts, _, history, support = _carry_world(rng, rng.randint(8, 12), QA1_3_PEOPLE, QA1_3_OBJECTS)
        moved = sorted(o for o in QA1_3_OBJECTS if len(history[o]) >= 2)
        if moved:
            o = rng.choice(moved)
            return Story("qa3", facts, f"Where was the {o} before the {history[o][-1]}?", history[o][-2], support[o])


_OPPOSITE = {"north": "south", "south": "north", "east": "west", "west": "east"}


def _qa4(rng: random.Random) -> Story:
    a, b, c = rng.sample(LOCATIONS, 3)
    d1, d2 = rng.choice(DIRECTIONS), rng.choice(DIRECTIONS)
    while d2 == _OPPOSITE[d1]:  # a north of b, b south of c: c is north of b too, and either question has two answers
        d2 = rng.choice(DIRECTIONS)
    facts = [f"The {a} is {d1} of the {b}.", f"The {b} is {d2} of the {c}."]
    order = [0, 1] if rng.random() < 0.5 else [1, 0]
    facts = [facts[i] for i in order]
    if rng.random() < 0.5:  # "What is d1 of b?" -> a
        return Story("qa4", facts, f"What is {d1} of the {b}?", a, [order.index(0)])
    return Story("qa4", facts, f"What is the {b} {d2} of?", c, [order.index(1)])


def _qa5(rng: random.Random) -> Story:
    while True:
        holder: Dict[str, Optional[str]] = {o: None for o in QA5_OBJECTS}
        facts: List[str] = []
        gives: List[Tuple[str, str, str, int]] = []  # (giver, object, receiver, fact index)
        for _ in range(rng.randint(4, 8)):
            free = [o for o in QA5_OBJECTS if holder[o] is None]
            held = [o for o in QA5_OBJECTS if holder[o] is not None]
            if held and (not free or rng.random() < 0.6):
                o = rng.choice(held)
                giver = holder[o]
                receiver = rng.choice([p for p in QA5_PEOPLE if p != giver])
                gives.append((giver, o, receiver, len(facts)))
                facts.append(f"{giver} {rng.choice(GIVE_VERBS)} the {o} to {receiver}.")
                holder[o] = receiver
            elif free:
                o, p = rng.choice(free), rng.choice(QA5_PEOPLE)
                holder[o] = p
                facts.append(f"{p} {rng.choice(GRAB_VERBS)} the {o}.")
        if not gives:
            continue
        giver, o, receiver, i = rng.choice(gives)
        kind = rng.choice(["who_gave", "to_whom", "what"])
        if kind == "who_gave":
            matches = [g for g in gives if g[1] == o and g[2] == receiver]
            if len(matches) == 1:
                return Story("qa5", facts, f"Who gave the {o} to {receiver}?", giver, [i])
        elif kind == "to_whom":
            matches = [g for g in gives if g[0] == giver and g[1] == o]
            if len(matches) == 1:
                return Story("qa5", facts, f"Who did {giver} give the {o} to?", receiver, [i])
        else:
            matches = [g for g in gives if g[0] == giver and g[2] == receiver]
            if len(matches) == 1:
                return Story("qa5", facts, f"What did {giver} give to {receiver}?", o, [i])


_MAKERS: Dict[str, Callable[[random.Random], Story]] = {"qa1": _qa1, "qa2": _qa2, "qa3": _qa3, "qa4": _qa4, "qa5": _qa5}


def make_story(qa: str, rng: random.Random) -> Story:
    """One random bAbI-style story for task ``qa`` (``"qa1"`` .. ``"qa5"``), answer correct by construction."""
    check_qa(qa)
    return _MAKERS[qa](rng)
