//! The `oomlens` binary.
fn main() {}
