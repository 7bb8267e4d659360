//! End-to-end tests: the real `oomlens` binary on real files. One binary, modules by area.

mod accounts;
mod admin;
mod browser;
mod cli_analyze;
mod cli_replay;
mod cli_upload;
mod cli_whatif;
mod groups;
mod review;
mod runner_api;
mod server_api;
mod web_pages;
