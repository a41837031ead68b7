//! perf.data read in the core: the file (`perf_file`, `tracing_formats`), its events decoded
//! (`decoder`) a time slice at a time (`reader`) where the native reader supports the file
//! (`support`), user stacks unwound (`unwind`), and the symbols of the files they name
//! (`symbols`, `elf_files`).

pub mod decoder;
pub mod elf_files;
pub mod index;
pub mod perf_file;
pub mod reader;
pub mod rounds;
pub mod support;
pub mod symbols;
pub mod tracing_formats;
pub mod unwind;
