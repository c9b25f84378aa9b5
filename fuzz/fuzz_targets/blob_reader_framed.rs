//! Structure-aware `BlobReader`: the input is a read program plus a payload. The payload is
//! framed with `BlobWriter` (checked against the reference framing), so every input gets past
//! the checksum, and the program's reads are checked field by field against a plain cursor
//! over the payload. Then the same fields are written back with `BlobWriter` and re-read
//! (round trip).
//!
//! Input: `kind`, `n`, `n` program bytes, payload.
#![no_main]

use doca_soft::blob::{BlobReader, BlobWriter};
use doca_soft::types::*;
use doca_soft_fuzz::{reference_frame, reference_unframe, KINDS};
use libfuzzer_sys::fuzz_target;

/// One field as read.
#[derive(Debug, PartialEq, Eq)]
enum Field {
    U8(u8),
    U16(u16),
    U32(u32),
    U64(u64),
    Var(Vec<u8>),
    Raw(Vec<u8>),
}

/// The reference cursor: the fields `program` reads from `p`, up to the first that does not
/// fit, and whether one did not fit.
fn reference_read(program: &[u8], p: &[u8]) -> (Vec<Field>, usize, bool) {
    let mut pos = 0usize;
    let mut out = Vec::new();
    for &op in program {
        let take = |pos: &mut usize, n: usize| -> Option<Vec<u8>> {
            let s = p.get(*pos..pos.checked_add(n)?)?.to_vec();
            *pos += n;
            Some(s)
        };
        let f = match op % 6 {
            0 => take(&mut pos, 1).map(|b| Field::U8(b[0])),
            1 => take(&mut pos, 2).map(|b| Field::U16(u16::from_le_bytes([b[0], b[1]]))),
            2 => take(&mut pos, 4).map(|b| Field::U32(u32::from_le_bytes(b.try_into().unwrap()))),
            3 => take(&mut pos, 8).map(|b| Field::U64(u64::from_le_bytes(b.try_into().unwrap()))),
            4 => take(&mut pos, 4)
                .map(|b| u32::from_le_bytes(b.try_into().unwrap()) as usize)
                .and_then(|n| take(&mut pos, n))
                .map(Field::Var),
            _ => take(&mut pos, usize::from(op / 6)).map(Field::Raw),
        };
        match f {
            Some(f) => out.push(f),
            None => return (out, pos, true),
        }
    }
    (out, pos, false)
}

fn read(r: &mut BlobReader<'_>, program: &[u8]) -> Result<Vec<Field>, (Vec<Field>, doca_error_t)> {
    let mut out = Vec::new();
    for &op in program {
        let f = match op % 6 {
            0 => r.u8().map(Field::U8),
            1 => r.u16().map(Field::U16),
            2 => r.u32().map(Field::U32),
            3 => r.u64().map(Field::U64),
            4 => r.var_bytes().map(|b| Field::Var(b.to_vec())),
            _ => r.bytes(usize::from(op / 6)).map(|b| Field::Raw(b.to_vec())),
        };
        match f {
            Ok(f) => out.push(f),
            Err(e) => return Err((out, e)),
        }
    }
    Ok(out)
}

fuzz_target!(|data: &[u8]| {
    let [k, n, rest @ ..] = data else { return };
    let kind = KINDS[usize::from(*k) % KINDS.len()];
    let (program, payload) = rest.split_at(usize::from(*n).min(rest.len()));

    let mut w = BlobWriter::new(kind);
    w.bytes(payload);
    let blob = w.finish();
    assert_eq!(blob, reference_frame(kind, payload));
    assert_eq!(reference_unframe(&blob, kind).unwrap(), payload);
    // Any other kind is refused.
    for other in KINDS.into_iter().filter(|&o| o != kind) {
        assert_eq!(BlobReader::new(&blob, other).unwrap_err(), DOCA_ERROR_INVALID_VALUE);
    }

    let mut r = BlobReader::new(&blob, kind).expect("a blob framed by BlobWriter");
    let (want, consumed, short) = reference_read(program, payload);
    match read(&mut r, program) {
        Ok(got) => {
            assert!(!short, "read past the payload");
            assert_eq!(got, want);
            assert_eq!(r.remaining(), payload.len() - consumed);
            assert_eq!(r.finish().is_ok(), consumed == payload.len());
        }
        Err((got, e)) => {
            assert!(short, "refused a read that fits: {e:?}");
            assert_eq!(e, DOCA_ERROR_INVALID_VALUE);
            assert_eq!(got, want);
        }
    }

    // Round trip: write the fields read by the reference, read them back the same way.
    let mut w = BlobWriter::new(kind);
    for f in &want {
        match f {
            Field::U8(v) => w.u8(*v),
            Field::U16(v) => w.u16(*v),
            Field::U32(v) => w.u32(*v),
            Field::U64(v) => w.u64(*v),
            Field::Var(v) => w.var_bytes(v),
            Field::Raw(v) => w.bytes(v),
        };
    }
    let blob = w.finish();
    let mut r = BlobReader::new(&blob, kind).expect("round trip");
    let got = read(&mut r, &program[..want.len()]).expect("round trip fields");
    assert_eq!(got, want);
    r.finish().expect("round trip leaves nothing over");
});
