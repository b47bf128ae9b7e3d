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


@pytest.fixture(scope="session")
def llama_url():
    """Base URL (ending in /v1) of a real llama.cpp server on loopback serving the embedded model:
    the one `.ci/run` started (RUBRICRL_TEST_LLAMA_URL), else one started in this process."""
    url = os.environ.get("RUBRICRL_TEST_LLAMA_URL")
    if url:
        yield url.rstrip("/")
        return
    from rubricrl.llm.llama_server import LlamaServer

    server = LlamaServer(parallel=4).start()
    yield server.url
    server.stop()
