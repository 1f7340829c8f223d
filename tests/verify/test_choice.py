"""extract_choice on many phrasings (incl. the known failures of popular harnesses) + properties."""

from __future__ import annotations

import random

import pytest

from beacon.verify import extract_choice

COLORS = {"A": "red", "B": "blue", "C": "green", "D": "yellow"}
ANIMALS = {"A": "dog", "B": "cat", "C": "bird", "D": "fish"}
CLOCK = {"A": "half", "B": "quarter", "C": "o'clock", "D": "quarter to", "E": "quarter past"}
ANGLES = {"A": "135°", "B": "140°", "C": "145°", "D": "150°"}
LENGTHS = {"A": "6cm", "B": "7cm", "C": "4cm", "D": "5cm"}
YES_NO = {"A": "Yes", "B": "No"}
LETTERS = {k: k for k in "ABCDE"}  # MathVista pid 10: the option texts are the letters

CASES = [
    # The three failures of popular harnesses named in the issue.
    ("Answer: B", COLORS, "B"),
    ("the answer is C.", COLORS, "C"),
    ("<answer>The answer is C</answer>", {**COLORS, "E": "purple"}, "C"),
    # Letter forms.
    ("B", COLORS, "B"),
    ("(B)", COLORS, "B"),
    ("B.", COLORS, "B"),
    ("B)", COLORS, "B"),
    ("[D]", COLORS, "D"),
    ("**B**", COLORS, "B"),
    ("Option B", COLORS, "B"),
    ("b", COLORS, "B"),
    ("(c)", COLORS, "C"),
    ("answer: c", COLORS, "C"),
    ("ANSWER: C", COLORS, "C"),
    ("<answer>B</answer>", COLORS, "B"),
    ("\\boxed{B}", COLORS, "B"),
    ("$\\boxed{\\text{C}}$", COLORS, "C"),
    ("The final answer is $\\boxed{D}$.", COLORS, "D"),
    ("<answer>\\boxed{A}</answer>", COLORS, "A"),
    ("<answer>C", COLORS, "C"),  # closing tag missing at the very end
    # Labels followed by text.
    ("Answer: (B) blue", COLORS, "B"),
    ("Answer: B) blue", COLORS, "B"),
    ("B. blue", COLORS, "B"),
    ("B: blue", COLORS, "B"),
    ("Final answer: (D) yellow", COLORS, "D"),
    ("Comparing all options, the answer is (D) yellow.", COLORS, "D"),
    # Markers.
    ("**Answer:** D", COLORS, "D"),
    ("Final answer: C", COLORS, "C"),
    ("The correct option is D.", COLORS, "D"),
    ("The correct answer is (A).", COLORS, "A"),
    ("The correct choice is (b).", COLORS, "B"),
    ("Answer:\n\nB", COLORS, "B"),
    ("答案是 C", COLORS, "C"),
    ("After analysis, the best option is C.", COLORS, "C"),
    ("I would choose B.", COLORS, "B"),
    ("I pick option (C).", COLORS, "C"),
    ("Looking at the image...\n\n**Answer:** A", COLORS, "A"),
    # Several letters: position rules.
    ("So the answer is B, not C.", COLORS, "B"),
    ("The answer is not A; the answer is C.", COLORS, "C"),
    ("Answer: B\nWait, let me re-check. The answer is D.", COLORS, "D"),
    ("The answer is A because the light is red", COLORS, "A"),
    ("A is correct.", COLORS, "A"),
    ("Based on U.S. data, B", COLORS, "B"),
    ("B\n\nExplanation: the red light is off, so the bus is blue.", COLORS, "B"),  # letter first
    ("Options A and C are wrong: the answer is B.", COLORS, "B"),
    # Contrasts: the chosen letter beside a rejected one.
    ("The answer is B rather than C.", COLORS, "B"),
    ("<answer>B rather than C</answer>", COLORS, "B"),
    ("It is B, not C.", COLORS, "B"),
    ("I'd go with (B) and not (C)", COLORS, "B"),
    ("The answer is B instead of C.", COLORS, "B"),
    ("B instead of C", COLORS, "B"),
    ("Answer: not C but B", COLORS, "B"),
    ("It is not C, but rather B.", COLORS, "B"),
    ("<answer>not C but B</answer>", COLORS, "B"),
    # Option text.
    ("I think it is blue.", COLORS, "B"),
    ("It's green.", COLORS, "C"),
    ("<answer>yellow</answer>", COLORS, "D"),
    ("<answer>Yellow.</answer>", COLORS, "D"),
    ("The image shows a yellow bike, so the answer is yellow.", COLORS, "D"),
    ("A cat is sitting on the mat.", ANIMALS, "B"),  # "A" is the article
    ("I see a dog.", ANIMALS, "A"),  # "I" is the pronoun
    ("The answer is A dog.", ANIMALS, "A"),
    ("I think it's a bird", ANIMALS, "C"),
    ("<answer>A</answer>", ANIMALS, "A"),
    ("It is quarter past.", CLOCK, "E"),  # longest overlapping match wins
    ("<answer>quarter</answer>", CLOCK, "B"),
    ("quarter to", CLOCK, "D"),
    ("<answer>145</answer>", ANGLES, "C"),
    ("The angle is 145^\\circ.", ANGLES, "C"),
    ("145 degrees", ANGLES, "C"),
    ("<answer>6 cm</answer>", LENGTHS, "A"),
    ("No, the left one is bigger.", YES_NO, "B"),  # the match that starts the span
    ("Yes", YES_NO, "A"),
    ("The answer is E.", LETTERS, "E"),
    # Code and tool output are not the answer.
    (
        "<code>```python\nprint('A')\n```</code><sandbox_output>A</sandbox_output>\n"
        "<answer>C</answer>",
        COLORS,
        "C",
    ),
    (
        "<code>print('answer is A')</code><sandbox_output>answer is A</sandbox_output>\n"
        "So the answer is D.",
        COLORS,
        "D",
    ),
    ("<think>Maybe A... or B.</think>The answer is C", COLORS, "C"),
    # Unreadable: None, never a guess.
    ("The color is red, not blue.", COLORS, None),
    ("A or B", COLORS, None),
    ("I don't know.", COLORS, None),
    ("", COLORS, None),
    ("   \n  ", COLORS, None),
    ("Answer: E", COLORS, None),  # E is not an option: not read as another letter
    ("E", COLORS, None),
    ("A cat sits on the mat.", COLORS, None),
    ("The answer isn't obvious between options A and C.", COLORS, None),
    ("<answer>130</answer>", ANGLES, None),
    ("E rather than B", COLORS, None),  # the chosen letter is no option; B was rejected
    ("<answer>something else entirely</answer> B", COLORS, None),
    (
        "Let me zoom in.<code>```python\ncrop = image.crop((0, 0, 9, 9))\n```</code>"
        "<sandbox_output>Answer: A</sandbox_output>",
        COLORS,
        None,
    ),
]


@pytest.mark.parametrize(("response", "options", "expected"), CASES)
def test_phrasing(response: str, options: dict[str, str], expected: str | None) -> None:
    assert extract_choice(response, options) == expected


def test_at_least_sixty_phrasings() -> None:
    assert len(CASES) >= 60


def test_returns_key_as_spelled_in_options() -> None:
    options = {"a": "red", "b": "blue"}
    assert extract_choice("Answer: B", options) == "b"
    assert extract_choice("blue", options) == "b"


_TOKENS = [
    "A", "B", "C", "D", "E", "I", "Z", "(B)", "C.", "answer", "Answer:", "is", "the", "not",
    "option", "a", "cat", "red", "blue", "green", "quarter", "past", "\\boxed{", "}", "<answer>",
    "</answer>", "<sandbox_output>", "</sandbox_output>", "```", "\n", ",", ".", "145", "°",
    "**", "I think", "final answer", "$", "U.S.", "x",
]  # fmt: skip


def _random_response(rng: random.Random) -> str:
    return " ".join(rng.choice(_TOKENS) for _ in range(rng.randint(0, 25)))


def _random_options(rng: random.Random) -> dict[str, str]:
    letters = "ABCDEFGHIJ"[: rng.randint(2, 10)]
    words = ["red", "blue", "green", "cat", "a cat", "quarter", "quarter past", "145°", "7", ""]
    return {letter: rng.choice(words) for letter in letters}


def test_property_never_returns_a_key_outside_options() -> None:
    rng = random.Random(0)
    for _ in range(1500):
        options = _random_options(rng)
        found = extract_choice(_random_response(rng), options)
        assert found is None or found in options


def test_property_every_letter_in_an_answer_tag_is_read() -> None:
    rng = random.Random(1)
    for _ in range(200):
        options = _random_options(rng)
        key = rng.choice(list(options))
        form = rng.choice(["{}", "({})", "{}.", "{})", "**{}**", "Option {}", "The answer is {}"])
        assert extract_choice(f"<answer>{form.format(key)}</answer>", options) == key


def test_property_distinct_option_texts_are_read_back() -> None:
    texts = ["tadpole", "common water flea", "great diving beetle", "tilapia"]
    rng = random.Random(2)
    for _ in range(50):
        rng.shuffle(texts)
        options = dict(zip("ABCD", texts, strict=True))
        key = rng.choice("ABCD")
        assert extract_choice(f"<answer>{options[key].title()}</answer>", options) == key


def test_property_sandbox_output_does_not_change_the_reading() -> None:
    rng = random.Random(3)
    for _ in range(200):
        options = _random_options(rng)
        response = _random_response(rng)
        noise = f"<sandbox_output>Answer: {rng.choice('ABCDEFGHIJ')}</sandbox_output>"
        assert extract_choice(noise + "\n" + response, options) == extract_choice(response, options)
