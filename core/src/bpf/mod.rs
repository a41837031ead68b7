//! Recording with BPF: the programs of offcpu.bpf.c loaded and drained to the capture (`recorder`).

pub mod recorder;
