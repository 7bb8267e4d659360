//! Fuzz target: the OOM-log parser (`oomlens_engine::oomtext::parse_oom_log`) on arbitrary
//! UTF-8 text. Any panic, timeout or out-of-memory is a bug.
#![no_main]

use libfuzzer_sys::fuzz_target;
use oomlens_engine::oomtext::{looks_like_oom_log, parse_oom_log};

fuzz_target!(|text: &str| {
    let _ = looks_like_oom_log(text);
    let messages = parse_oom_log(text);
    std::hint::black_box(messages.len());
});
