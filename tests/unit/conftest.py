"""The unit tests name the frames of the committed fixtures as `offcpu report` would on any
machine: the examples' binaries they are in, recorded at paths no other machine has, are found
by build id in tests/fixtures/build-ids, where PERF_BUILDID_DIR points perf's cache (the core
looks there for a file gone from its path). No unit test runs perf record, which would write
its cache there."""

import os

from tests.fixtures import BUILD_IDS

os.environ["PERF_BUILDID_DIR"] = str(BUILD_IDS)
