"""offcpu's compiled core (core/, Rust): its Python interface."""

RECORD_SIZE: int  # the bytes of one record of bpf-records.bin
NOT_TAKEN: int  # a stack id of a stack that was not taken (the wait was not sampled)

class BpfError(Exception):
    """The BPF recording could not be set up or read."""

class BpfRecording:
    """A recording in the kernel, from its start to finish()."""

    def __init__(self, records: str, filter: str, processes: list[int], cgroups: list[int], follow_forks: bool,
                 stacks_per_second: int, long_wait_ns: int) -> None: ...
    def counters(self) -> dict[str, int]: ...
    def finish(self, stacks: str) -> dict[str, int]: ...
