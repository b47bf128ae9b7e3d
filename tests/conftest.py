import os
import tempfile

import pytest

# Converted models and verdict caches go to a per-session directory, so every test run exercises
# the GGUF conversion like a fresh machine does and never touches the user's cache.
os.environ.setdefault("RUBRICRL_CACHE_DIR", tempfile.mkdtemp(prefix="rubricrl-test-cache-"))


@pytest.fixture(scope="session")
def local_judge():
    from rubricrl.judges.local import LocalJudge

    return LocalJudge()
