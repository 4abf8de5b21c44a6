//! The library half of the `lockstep` package: what the command line renders for people. The
//! analysis lives in `lockstep-query` (`lockstep_query::diagnose`); its result is rendered here,
//! as text for the terminal and as the self-contained HTML report ([`report`]). The binary
//! (`src/main.rs`) and the end-to-end tests use it.

pub mod report;
