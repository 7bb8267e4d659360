//! End-to-end test crate for oomlens: the tests live in `e2e/`, they drive the real `oomlens` binary.
