"""The sandbox's isolation layers, each tried as an attacker would: the wire protocol,
IPC and keyring channels between samples, the allow-list file system, CPU fairness
under hostile samples, and the seccomp filter."""

from __future__ import annotations

import dataclasses
import importlib.util

import pytest

from codeparrot.eval.sandbox import ZYGOTE, Limits, limits_header


@pytest.fixture(scope="module")
def zygote():
    spec = importlib.util.spec_from_file_location("codeparrot_zygote", ZYGOTE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_limits_cross_the_wire_under_their_own_names(zygote):
    limits = Limits(timeout=2.5, memory=300 << 20, file_size=5 << 20, processes=3)
    assert zygote.parse_limits(limits_header(limits)) == dataclasses.asdict(limits)
    with pytest.raises(ValueError, match="fields"):
        zygote.parse_limits(b'{"timeout": 1, "memory": 1, "fsize": 1, "nproc": 1}')
