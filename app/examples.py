"""The prompts of the CodeParrot chapter ("NLP with Transformers", ch. 10), one click away.

Each example carries the settings that suit it: function bodies end at the first block
(the HumanEval stop sequences), the scikit-learn prompt is a comment asking for a few
statements and so runs without stop sequences.
"""

from __future__ import annotations

from dataclasses import dataclass

STOP_FIRST_BLOCK = "first block"
STOP_SEQUENCES = "stop sequences"
STOP_NONE = "none"
STOP_MODES = (STOP_FIRST_BLOCK, STOP_SEQUENCES, STOP_NONE)


@dataclass(frozen=True)
class Example:
    label: str
    prompt: str
    stop_mode: str = STOP_FIRST_BLOCK
    max_new_tokens: int = 64


CHAPTER_EXAMPLES: tuple[Example, ...] = (
    Example(
        "Area of a rectangle",
        'def area_of_rectangle(a: float, b: float):\n    """Return the area of the rectangle."""',
    ),
    Example(
        "URLs from HTML",
        'def get_urls_from_html(html):\n    """Get all embedded URLs in a HTML string."""',
    ),
    Example(
        "Mean with numpy",
        "# a function in native python:\n"
        "def mean(a):\n"
        "    return sum(a)/len(a)\n"
        "\n"
        "# the same function using numpy:\n"
        "import numpy as np\n"
        "def mean(a):",
    ),
    Example(
        "Random forest, 20 estimators",
        "X = np.random.randn(100, 100)\n"
        "y = np.random.randint(0, 1, 100)\n"
        "\n"
        "# fit random forest classifier with 20 estimators",
        stop_mode=STOP_NONE,
        max_new_tokens=48,
    ),
)
