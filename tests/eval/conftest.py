"""The recordings a run without per-call feedback keeps (codeparrot.eval.recordings) go
to the session's temporary folder, never to the user's cache."""

from __future__ import annotations

import pytest


@pytest.fixture(autouse=True, scope="session")
def _kept_recordings_of_the_session(tmp_path_factory: pytest.TempPathFactory):
    import os

    from codeparrot.eval.recordings import ENV

    before = os.environ.get(ENV)
    os.environ[ENV] = str(tmp_path_factory.mktemp("recordings"))
    yield
    if before is None:
        os.environ.pop(ENV, None)
    else:
        os.environ[ENV] = before
