//! Reading perf.data in the core: user stacks unwound (`unwind`), and the symbols of the
//! files they name (`symbols`, `elf_files`).

pub mod elf_files;
pub mod symbols;
pub mod unwind;
