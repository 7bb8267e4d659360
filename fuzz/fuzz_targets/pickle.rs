//! Fuzz target: the safe pickle reader on arbitrary bytes, default limits. Any panic, abort,
//! stack overflow, timeout or out-of-memory is a bug; an `Err` is the expected outcome.
#![no_main]

use libfuzzer_sys::fuzz_target;
use oomlens_engine::pickle::{Limits, from_slice};

fuzz_target!(|data: &[u8]| {
    if let Ok(v) = from_slice(data, Limits::default()) {
        // Walk the result a little, as a consumer would.
        let _ = v.type_name();
        let _ = v.as_i128();
    }
});
