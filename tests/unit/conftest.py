"""The unit tests name the frames of the committed fixtures as `offcpu report` would on any
machine: the examples' binaries they are in, recorded at paths no other machine has, are found
by build id in tests/fixtures/build-ids, where PERF_BUILDID_DIR points the core and a config of
perf's own (`buildid.dir`) points perf script: perf takes its cache's place from its config
alone (it sets PERF_BUILDID_DIR for the programs it runs, and reads it not), and offcpu hands
perf none of its own environment but for the variables it keeps (offcpu.workers), to which
PERF_CONFIG is added here. No unit test runs perf record, which would write its cache there."""

import os
from collections.abc import Iterator

import pytest

from offcpu import workers
from tests.fixtures import BUILD_IDS

os.environ["PERF_BUILDID_DIR"] = str(BUILD_IDS)


@pytest.fixture(autouse=True, scope="session")
def _perf_reads_the_fixtures_cache(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """perf's config for the session: the build-id cache alone, read in place of the user's."""
    config = tmp_path_factory.mktemp("perf") / "perfconfig"
    config.write_text(f"[buildid]\n\tdir = {BUILD_IDS}\n")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("PERF_CONFIG", str(config))
        patch.setattr(workers, "KEPT_VARIABLES", (*workers.KEPT_VARIABLES, "PERF_CONFIG"))
        yield
