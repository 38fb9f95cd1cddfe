"""codeparrot.generation.stopping: the one escape decoder and the incremental stop scan."""

from __future__ import annotations

import pytest

from codeparrot.errors import ConfigError
from codeparrot.generation import decode_escapes
from codeparrot.generation.stopping import StopStrings


def test_one_decoder_for_typed_stop_strings():
    assert decode_escapes("\\ndef") == "\ndef"
    assert decode_escapes("é\\t\\\\n") == "é\t\\n"  # non-ASCII survives; \\\\ is a backslash
    with pytest.raises(ConfigError, match=r"stop string 'abc.*': broken backslash escape"):
        decode_escapes("abc\\")
    from codeparrot.app.ui import stop_sequences  # the playground decodes the same way

    assert stop_sequences("stop sequences", "\\x41\n\\\\n") == ("A", "\\n")


def test_text_that_may_start_a_stop_string_stays_held_back():
    stops = StopStrings(("\ndef",))
    assert stops.scan("x = 1\n", 5) == (None, 5)  # "\n" may become "\ndef"
    # a token that adds no text (half a UTF-8 character) must not release it either
    assert stops.scan("x = 1\n", 6) == (None, 5)
    assert stops.scan("x = 1\ndef", 6) == (5, 5)
    assert StopStrings(()).scan("x = \ufffd", 4) == (None, 4)  # half a character: wait
    assert stops.final("a\ndef b", 1) == 1 and StopStrings(()).final("a\ndef", 0) is None
