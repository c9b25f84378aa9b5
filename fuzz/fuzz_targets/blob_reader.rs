//! `BlobReader::new` on arbitrary bytes, for every blob kind, checked against the reference
//! framing in the fuzz crate; an accepted payload is then read to its end (fixed-width reads,
//! then length-prefixed chunks) without ever panicking or reading out of bounds.
#![no_main]

use doca_soft::blob::BlobReader;
use doca_soft::types::*;
use doca_soft_fuzz::{reference_unframe, KINDS};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    for kind in KINDS {
        let want = reference_unframe(data, kind);
        let mut r = match (BlobReader::new(data, kind), want) {
            (Ok(r), Ok(payload)) => {
                assert_eq!(r.remaining(), payload.len());
                r
            }
            (Err(e), Err(w)) => {
                assert_eq!(e, w, "{kind:?}: wrong error");
                continue;
            }
            (Ok(_), Err(w)) => panic!("{kind:?}: accepted a blob the reference refuses with {w:?}"),
            (Err(e), Ok(_)) => panic!("{kind:?}: refused a well-framed blob with {e:?}"),
        };
        // Mixed reads until one fails; every failure is INVALID_VALUE and consumes nothing
        // beyond the payload.
        let mut step = 0usize;
        loop {
            let before = r.remaining();
            let res = match step % 5 {
                0 => r.u8().map(|_| 1),
                1 => r.u16().map(|_| 2),
                2 => r.u32().map(|_| 4),
                3 => r.u64().map(|_| 8),
                _ => r.var_bytes().map(|b| 4 + b.len()),
            };
            match res {
                Ok(n) => assert_eq!(before - r.remaining(), n),
                Err(e) => {
                    assert_eq!(e, DOCA_ERROR_INVALID_VALUE);
                    break;
                }
            }
            step += 1;
        }
        let left = r.remaining();
        assert_eq!(r.finish().is_ok(), left == 0);
    }
});
