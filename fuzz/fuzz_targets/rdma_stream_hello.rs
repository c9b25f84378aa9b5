//! Structure-aware fuzzing of the RdmaStream handshake header (`src/rdma/stream.rs`): the
//! 32-bit immediate every message carries (FIN, HELLO, 14 bits of credits, 16 bits of
//! sequence number) and the 16-byte `HELLO` payload (magic, version, chunk size, receive
//! buffers), through the pure functions the stream's receive path calls
//! (`async_doca::rdma::stream::fuzzing`, hidden, not API).
//!
//! The input is a script of steps; each picks a shape and takes its fields from the bytes
//! after it:
//! * a valid `HELLO` with fuzzed chunk size and buffer count inside the limits: it decodes to
//!   exactly what was encoded;
//! * a `HELLO` with fields outside the limits (chunk below the minimum, buffers below the
//!   minimum or above what the credit field can count): refused;
//! * a `HELLO` with a corrupted magic or version byte: refused;
//! * a `HELLO` cut short or extended by fuzzed bytes: refused (only exactly 16 bytes are one);
//! * raw bytes: whatever `decode_hello` says must agree with an independent reading of the
//!   format, and anything it accepts re-encodes to the same bytes;
//! * an immediate built from every combination of the two flags with fuzzed credits and
//!   sequence number: it decodes to the flags, the credits cut to 14 bits and the sequence
//!   number; and a raw immediate decodes to fields that re-encode to it bit for bit.
//!
//! Nothing may panic (a panic aborts the fuzzer).
#![no_main]

use async_doca::rdma::stream::fuzzing::*;
use doca_soft_fuzz::Cursor;
use libfuzzer_sys::fuzz_target;

const MIN_BUFS: u32 = MIN_RECV_BUFFERS as u32;
const MAX_BUFS: u32 = MAX_RECV_BUFFERS as u32;

/// The format, read independently of the code under test: what a 16-byte payload announces
/// if the stream should accept it.
fn oracle(p: &[u8]) -> Option<(u32, u32)> {
    if p.len() != HELLO_LEN {
        return None;
    }
    let w = |i: usize| u32::from_le_bytes(p[4 * i..4 * i + 4].try_into().unwrap());
    let ok =
        &p[..4] == b"RDST" && w(1) == 1 && w(2) as usize >= MIN_CHUNK_SIZE && (MIN_BUFS..=MAX_BUFS).contains(&w(3));
    ok.then(|| (w(2), w(3)))
}

/// A chunk size and buffer count inside the limits, from fuzzed words.
fn valid_fields(c: &mut Cursor<'_>) -> Option<(u32, u32)> {
    let chunk = (c.u32()?).max(MIN_CHUNK_SIZE as u32);
    let bufs = MIN_BUFS + u32::from(c.u16()?) % (MAX_BUFS - MIN_BUFS + 1);
    Some((chunk, bufs))
}

fn check_hello(payload: &[u8], want: Option<(u32, u32)>) {
    let got = decode_hello(payload);
    assert_eq!(got, want, "decode_hello({payload:02x?})");
    assert_eq!(got, oracle(payload), "decode_hello disagrees with the format: {payload:02x?}");
    if let Some((chunk, bufs)) = got {
        assert_eq!(&encode_hello(chunk, bufs)[..], payload, "an accepted HELLO is canonical");
    }
}

fn step(c: &mut Cursor<'_>) -> Option<()> {
    match c.u8()? % 8 {
        0 => {
            let (chunk, bufs) = valid_fields(c)?;
            let p = encode_hello(chunk, bufs);
            assert_eq!(&p[..4], &MAGIC.to_le_bytes());
            assert_eq!(&p[4..8], &VERSION.to_le_bytes());
            check_hello(&p, Some((chunk, bufs)));
        }
        1 => {
            // One field out of its limits, the other valid.
            let (chunk, bufs) = valid_fields(c)?;
            let bad = c.u32()?;
            let (chunk, bufs) = match c.u8()? % 3 {
                0 => (bad % MIN_CHUNK_SIZE as u32, bufs),
                1 => (chunk, bad % MIN_BUFS),
                _ => (chunk, bad.max(MAX_BUFS + 1)),
            };
            check_hello(&encode_hello(chunk, bufs), None);
        }
        2 => {
            // A corrupted magic (bytes 0..4) or version (bytes 4..8) byte.
            let (chunk, bufs) = valid_fields(c)?;
            let mut p = encode_hello(chunk, bufs);
            let at = usize::from(c.u8()? % 8);
            p[at] ^= c.u8()?.max(1);
            check_hello(&p, None);
        }
        3 => {
            // Cut short (0..16 bytes).
            let (chunk, bufs) = valid_fields(c)?;
            let p = encode_hello(chunk, bufs);
            let n = usize::from(c.u8()?) % HELLO_LEN;
            check_hello(&p[..n], None);
        }
        4 => {
            // Extended by 1..=32 fuzzed bytes.
            let (chunk, bufs) = valid_fields(c)?;
            let mut p = encode_hello(chunk, bufs).to_vec();
            let n = 1 + usize::from(c.u8()?) % 32;
            let mut tail = c.bytes(n);
            tail.resize(n, 0);
            p.extend_from_slice(&tail);
            check_hello(&p, None);
        }
        5 => {
            // Raw bytes: no promise but agreement with the format.
            let n = usize::from(c.u8()?) % 24;
            let p = c.bytes(n);
            let want = oracle(&p);
            check_hello(&p, want);
        }
        6 => {
            // Every flag combination, fuzzed credits (any u32: only 14 bits may travel)
            // and sequence number.
            let credits = c.u32()?;
            let seq = c.u16()?;
            for (fin, hello) in [(false, false), (true, false), (false, true), (true, true)] {
                let flags = (if fin { FIN } else { 0 }) | (if hello { HELLO } else { 0 });
                let imm = encode_imm(flags, credits, seq);
                assert_eq!(decode_imm(imm), (fin, hello, credits & 0x3fff, seq), "imm {imm:#010x}");
            }
        }
        _ => {
            // A raw immediate: its fields re-encode to it bit for bit (all 32 bits mean
            // something).
            let imm = c.u32()?;
            let (fin, hello, credits, seq) = decode_imm(imm);
            assert!(credits <= 0x3fff);
            assert_eq!((fin, hello), (imm & FIN != 0, imm & HELLO != 0));
            let flags = (if fin { FIN } else { 0 }) | (if hello { HELLO } else { 0 });
            assert_eq!(encode_imm(flags, credits, seq), imm);
        }
    }
    Some(())
}

fuzz_target!(|data: &[u8]| {
    let mut c = Cursor(data);
    while step(&mut c).is_some() {}
});
