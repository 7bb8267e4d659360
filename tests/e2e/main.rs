//! End-to-end tests: the real `oomlens` binary on real files. One binary, modules by area.

mod cli_analyze;
mod cli_replay;
mod cli_whatif;
