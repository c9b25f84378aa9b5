//! What the cross-process integration tests share: blobs carried as hex through the
//! environment or a pipe, and a guard that never leaves a child process behind.
//!
//! Each test file includes it with `mod common;` (cargo does not build `tests/common/` as a
//! test of its own). Each file uses a different part of it.
#![allow(dead_code)]

pub mod chaoskit;
pub mod cli;
pub mod cprog;
pub mod urom;

use std::process::Child;

/// Bytes as lower-case hex.
pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Hex back to bytes. Test helper: malformed input is a test bug, so it panics.
pub fn unhex(s: &str) -> Vec<u8> {
    (0..s.len()).step_by(2).map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap()).collect()
}

/// Kills and reaps the child if the test fails before reaping it itself.
pub struct Reap(pub Option<Child>);

impl Drop for Reap {
    fn drop(&mut self) {
        if let Some(mut c) = self.0.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}
