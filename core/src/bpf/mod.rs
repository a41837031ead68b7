//! Recording with BPF: the programs of offcpu.bpf.c loaded and drained to the capture
//! (`recorder`), in the records laid out in `record`.

pub mod decode;
pub mod record;
pub mod recorder;
pub mod records_file;
pub mod stack_store;
